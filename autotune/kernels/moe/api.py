"""Run-time entry point of the fused MoE: `fused_moe(hidden_states, w1, w2, topk_weights, topk_ids, ...)`.

vLLM's argument conventions (`fused_experts`): hidden states (M, K) bf16 or fp16, w1 (E, 2N, K) with the
gate rows before the up rows, w2 (E, K, N), the routing (M, topk) from `fused_topk`, and for FP8
weights their fp32 scales per [128, 128] block (`block_shape=[128, 128]`). MXFP4 weights (bf16 hidden
states only) are packed uint8, w1 (E, 2N, K/2) and w2 (E, K, N/2), two e2m1 a byte along K, with e8m0
uint8 scales per 32 along K, w1_scale (E, 2N, K/32) and w2_scale (E, K, N/32) (`moe.ref`): they run
`tl.dot_scaled` on gfx950 and are dequantized in registers (emulated) elsewhere (`moe.mx`). Each call
looks its shape up in the pinned tables of `autotune.dispatch` (op "moe", the weights' dtype, N, K, E,
topk; the M ranges an M profile measured, else the table's M policy) and runs that config of the fused
Triton kernel; a shape no table covers runs the op's heuristic default (and is logged as untuned). A
table entry of the "torch" baseline (a per-expert loop that reads the routing back) is served by the
default instead: the entry point never syncs with the host while a graph is captured.

Rules:
- Bad input (shapes, dtypes, devices, expert ids out of range) is one ValueError before any launch. The
  expert ids are range-checked by reading them back, except while a CUDA/HIP graph is captured (then the
  caller's routing is trusted).
- No host sync and no data-dependent size: the routing's block alignment is computed on the device for
  the worst case of the shape (`moe.routing.align_fixed`), so a call can be captured and replayed.
- Intermediate tensors (the alignment, the gate/up and down results, FP8 activations) are allocated once
  per (shape, config, device, stream) and reused by later calls (`WORKSPACES` most recent kept); while a
  graph is captured they come from the graph's pool instead, which keeps them as long as the graph, and
  while `torch.compile`'s CUDA graph trees warm one up they are allocated per call.
- The entry point is a registered torch op (`TORCH_OPS`: autotune::fused_moe, and autotune::fused_moe_out
  for `out` and `inplace`; see `autotune.kernels.torch_ops`); a call that names its `target` or a
  `config` (which no op takes: eager only) runs the implementation directly.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.kernels.common.target import launch_target
from autotune.kernels.moe.op import MOE, MXFP4
from autotune.kernels.moe.ref import FP8_DTYPES, validate_moe_call
from autotune.kernels.moe.routing import align_fixed, fresh_buffer
from autotune.kernels.serve import served_config
from autotune.kernels.torch_ops import TorchOp, eager, explained, graph_pool_warmup, register

__all__ = ["TORCH_OPS", "WORKSPACES", "entry_launch", "fused_moe", "moe_problem"]

_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
#: How many (shape, config, device, stream) workspaces are kept.
WORKSPACES = 16
_workspaces: OrderedDict[tuple[Any, ...], dict[str, torch.Tensor]] = OrderedDict()
_problems: dict[tuple[Any, ...], Problem] = {}


def moe_problem(x: torch.Tensor, w1: torch.Tensor, topk: int, target: Target) -> Problem:
    """The problem a call of `fused_moe` on these tensors serves (kept per shape)."""
    M, K = x.shape
    E, N = w1.shape[0], w1.shape[1] // 2
    key = (M, N, K, E, topk, x.dtype, w1.dtype, target.arch)
    found = _problems.get(key)
    if found is None:
        if w1.dtype in FP8_DTYPES:
            _check_fp8(w1.dtype, target)
        weights = "fp8e4m3" if w1.dtype in FP8_DTYPES else MXFP4 if w1.dtype == torch.uint8 else None
        found = Problem.of("moe", M, N, K, _DTYPES[x.dtype], weights, E=E, topk=topk)
        if len(_problems) >= 4096:
            _problems.clear()
        _problems[key] = found
    return found


def _check_fp8(dtype: torch.dtype, target: Target) -> None:
    """FP8 weights are the target's own e4m3 (`common.formats.fp8_dtype`: e4m3fnuz on gfx942, e4m3fn
    elsewhere), the op's "fp8e4m3": ValueError for the other flavour, which the target has no matrix
    instructions for (Triton emulates it, and no table holds it). The interpreter runs both."""
    from autotune.kernels.common.formats import fp8_dtype

    if target.interpreter:
        return
    own = fp8_dtype("fp8e4m3", target.arch)
    if dtype != own:
        raise ValueError(
            f"{target.arch} has no {str(dtype).removeprefix('torch.')} FP8: FP8 MoE weights there are "
            f"{own} (quantize them to it)"
        )


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _buffers(key: tuple[Any, ...] | None) -> Any:
    """The `buffers` of `moe.kernel.fused_moe`: tensors kept under `key` (None: fresh ones, the graph
    pool's while capturing)."""
    if key is None:
        return fresh_buffer
    held = _workspaces.pop(key, None)
    if held is None:
        held = {}
        while len(_workspaces) >= WORKSPACES:
            _workspaces.popitem(last=False)
    _workspaces[key] = held

    def get(name: str, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        t = held.get(name)
        if t is None or tuple(t.shape) != shape or t.dtype != dtype or t.device != device:
            t = held[name] = torch.empty(shape, dtype=dtype, device=device)
        return t

    return get


def _override(config: Config | Mapping[str, Any]) -> Config:
    """A caller's config of the fused kernel (backend "triton", where it names one), its tile sizes given."""
    chosen = config if isinstance(config, Config) else Config(dict(config))
    if chosen.backend != "triton":
        raise ValueError(f"config must be one of the fused kernel (backend 'triton'), got {chosen.backend!r}")
    missing = [k for k in ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K") if k not in chosen]
    if missing:
        raise ValueError(f"config lacks {', '.join(missing)}")
    return chosen


def _check_ids(topk_ids: torch.Tensor, E: int) -> None:
    if topk_ids.numel():
        lo_, hi_ = torch.stack(torch.aminmax(topk_ids)).tolist()  # one read back
        if lo_ < 0 or hi_ >= E:
            raise ValueError(f"topk_ids out of range [0, {E}): min {lo_}, max {hi_}")


def _check_call(
    x: Any,
    w1: Any,
    w2: Any,
    topk_weights: Any,
    topk_ids: Any,
    w1_scale: Any,
    w2_scale: Any,
    block_shape: Sequence[int] | None,
    out: Any,
) -> str:
    """The checks that read no data (shapes, dtypes, devices, `out`): the weights' kind."""
    if not all(isinstance(t, torch.Tensor) for t in (x, w1, w2, topk_weights, topk_ids)):
        raise TypeError("fused_moe takes tensors hidden_states, w1, w2, topk_weights and topk_ids")
    kind = validate_moe_call(x, w1, w2, topk_weights, topk_ids, w1_scale=w1_scale, w2_scale=w2_scale,
                             block_shape=block_shape, check_ids=False)  # fmt: skip
    if out is not None and (
        not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(x.shape) or out.dtype != x.dtype
        or out.device != x.device or not out.is_contiguous()
    ):  # fmt: skip
        got = (
            f"{tuple(out.shape)} {out.dtype} on {out.device}" if isinstance(out, torch.Tensor) else type(out)
        )
        raise ValueError(
            f"out must be a contiguous {tuple(x.shape)} {x.dtype} tensor on {x.device}, got {got}"
        )
    return kind


def _fused_moe_impl(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    block_shape: Sequence[int] | None = None,
    out: torch.Tensor | None = None,
    target: Target | None = None,
    config: Config | Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """autotune::fused_moe (and fused_moe_out with `out`): the checks, the lookup and the launches."""
    from autotune.kernels.moe.kernel import fused_moe as run_kernel  # imports triton: on first call

    x = hidden_states
    kind = _check_call(x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale, block_shape, out)
    mx, fp8 = kind == "mxfp4", kind == "fp8"
    forced = None if config is None else _override(config)
    capturing = _capturing(x.device)
    E = w1.shape[0]
    if not capturing:
        _check_ids(topk_ids, E)
    tgt = target or launch_target()
    problem = moe_problem(x, w1, topk_ids.shape[1], tgt)
    chosen = forced if forced is not None else served_config(MOE, problem, tgt)
    if out is None:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    if problem.M == 0:
        return out
    key = None
    if not capturing and not graph_pool_warmup(x.device):
        stream = torch.cuda.current_stream(x.device).cuda_stream if x.device.type == "cuda" else 0
        key = (x.device, stream, problem, chosen.canonical())
    buffers = _buffers(key)
    bm = int(chosen["BLOCK_SIZE_M"])
    alignment = align_fixed(topk_ids, bm, E, buffers)
    params = dict(chosen.items())
    params.pop("backend", None)
    if mx:
        from autotune.kernels.common.target import mx_native
        from autotune.kernels.moe.mx import fused_moe_mx

        assert w1_scale is not None and w2_scale is not None
        return fused_moe_mx(
            x, w1, w2, topk_weights, topk_ids, params, w1_scale=w1_scale, w2_scale=w2_scale,
            native=mx_native(tgt), is_amd=tgt.is_amd, interpret=tgt.interpreter, out=out, alignment=alignment,
            buffers=buffers,
        )  # fmt: skip
    return run_kernel(
        x, w1, w2, topk_weights, topk_ids, params, w1_scale=w1_scale, w2_scale=w2_scale,
        block_shape=block_shape if fp8 else None, is_amd=tgt.is_amd, interpret=tgt.interpreter, out=out,
        alignment=alignment, buffers=buffers, num_sms=tgt.cu_count,
    )  # fmt: skip


def _fused_moe_out_impl(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w1_scale: torch.Tensor | None,
    w2_scale: torch.Tensor | None,
    block_shape: Sequence[int] | None,
    out: torch.Tensor,
) -> None:
    _fused_moe_impl(hidden_states, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale, block_shape, out)


def _fused_moe_fake(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    block_shape: Sequence[int] | None = None,
) -> torch.Tensor:
    _check_call(hidden_states, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale, block_shape, None)
    return torch.empty_like(hidden_states, memory_format=torch.contiguous_format)


def _fused_moe_out_fake(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    w1_scale: torch.Tensor | None,
    w2_scale: torch.Tensor | None,
    block_shape: Sequence[int] | None,
    out: torch.Tensor,
) -> None:
    _check_call(hidden_states, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale, block_shape, out)


def fused_moe(
    hidden_states: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    *,
    inplace: bool = False,
    w1_scale: torch.Tensor | None = None,
    w2_scale: torch.Tensor | None = None,
    block_shape: Sequence[int] | None = None,
    out: torch.Tensor | None = None,
    target: Target | None = None,
    config: Config | Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """The MoE MLP out[t] = Σ_j topk_weights[t, j] · (silu(x[t] @ gateᵀ) · x[t] @ upᵀ) @ w2[e]ᵀ of every
    token t, e = topk_ids[t, j], in the config the loaded tables give this shape (module docstring).

    Returns (M, K) in hidden_states' dtype: written into `out` when given (contiguous, that shape and
    dtype), into hidden_states with `inplace`, else a new tensor. `config` runs that config of the fused
    kernel instead of the table's (vLLM's `override_config`; the knobs the kernel defaults need not be
    given). ValueError for bad input, before any launch. Runs the op autotune::fused_moe
    (autotune::fused_moe_out with `out` or `inplace`); with a `target` or a `config` (which no op takes:
    eager only) the implementation is called directly."""
    if inplace:
        if out is not None:
            raise ValueError("give `out` or `inplace`, not both")
        out = hidden_states
    args = (hidden_states, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale, block_shape)
    if target is not None or config is not None or eager(hidden_states, w1):
        return _fused_moe_impl(*args, out, target, config)
    try:
        if out is None:
            return _FUSED_MOE(*args)
        _FUSED_MOE_OUT(*args, out)
        return out
    except RuntimeError as exc:  # arguments that the schema refuses (not tensors): the check says why
        raise explained(exc, _check_call, *args, out) from None


_MOE_ARGS = (
    "Tensor hidden_states, Tensor w1, Tensor w2, Tensor topk_weights, Tensor topk_ids, "
    "Tensor? w1_scale=None, Tensor? w2_scale=None, int[]? block_shape=None"
)
#: The ops of this module (`autotune.kernels.torch_ops.register`).
TORCH_OPS = (
    TorchOp(f"fused_moe({_MOE_ARGS}) -> Tensor", _fused_moe_impl, _fused_moe_fake),
    TorchOp(
        f"fused_moe_out({_MOE_ARGS.replace('=None', '')}, Tensor(a!) out) -> ()",
        _fused_moe_out_impl,
        _fused_moe_out_fake,
    ),
)
_FUSED_MOE, _FUSED_MOE_OUT = register(*TORCH_OPS)


def entry_launch(
    problem: Problem, target: Target, inputs: Any, out: torch.Tensor, config: Config | None = None
) -> Callable[[], None]:
    """A launch of the entry point's own call, `fused_moe(x, w1, w2, topk_weights, topk_ids, ..., out=out,
    target=target)` on `MOE.make_inputs`'s inputs, the routing's alignment included on every call
    (`autotune.kernels.served_launch`); `config` forces the call's config. ValueError where the inputs
    are not `problem`'s."""
    if len(inputs) != 7:
        raise ValueError(
            f"moe takes (x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale), got {len(inputs)} inputs"
        )
    x, w1, w2, weights, ids, w1s, w2s = inputs
    given = moe_problem(x, w1, ids.shape[1], target)
    if given != problem:
        raise ValueError(f"the inputs are those of {given}, not {problem}")
    block = [128, 128] if w1s is not None and w1.dtype.is_floating_point else None  # FP8: 128x128 scales

    def launch() -> None:
        fused_moe(x, w1, w2, weights, ids, w1_scale=w1s, w2_scale=w2s, block_shape=block, out=out,
                  target=target, config=config)  # fmt: skip

    return launch
