"""Run-time entry point of the MLA decode: `mla_decode(q, kv_cache, page_table, context_lens, ...)`.

q (B, H, K) bf16 with K = latent + RoPE dims (576 = 512 + 64 for DeepSeek-V3 and Kimi-K2); kv_cache
(pages, page_size, K) in bf16, or FP8 with its per-tensor scale `kv_scale` (e4m3fn; e4m3fnuz on gfx942);
page_table (B, max_pages) int32; context_lens (B,) int32. Returns (B, H, latent) bf16, the latent dims
given by `latent` (default K − 64).

Each call looks its shape up in the loaded tables (op "mla_decode", N = latent, K, M = B through the M
ranges, the parameters heads, context bucket, kv_dtype and page_size) and runs that config: of the split-KV
kernel, of its Gluon version on Hopper, or the gathered baseline where a table measured it fastest
("aiter" is never served); a shape no table covers runs the op's heuristic default (the Gluon kernel's
on Hopper where it was measured to win, `mla.gluon_space.gluon_default`; else the split-KV kernel's) and
is logged as untuned.

Rules:
- The context bucket is a shape, never a value of `context_lens`: `max_context` where the caller gives it
  (its longest sequence, known on the host), else what the page table holds (max_pages x page_size),
  rounded up to a power of two of at least 1024. Any context within the pages is computed right under
  any config; the bucket only picks the config.
- No host sync and no data-dependent size: the splits and their workspace come from the shape and the
  config. The workspace is allocated once per (shape, config, device, stream) and kept (`WORKSPACES` most
  recent); while a graph is captured it comes from the graph's pool instead, and while `torch.compile`'s
  CUDA graph trees warm one up it is allocated per call.
- Bad input is one ValueError before any launch: shapes, dtypes, devices, a missing or needless
  `kv_scale`. The page-table entries a sequence uses and the context lengths (negative, or more than the
  pages hold) are checked by reading them back, except while a CUDA/HIP graph is captured.
- The entry point is a registered torch op (`TORCH_OPS`: autotune::mla_decode, and autotune::mla_decode_out
  for `out`; see `autotune.kernels.torch_ops`); a call that names its `target` (which no op takes: eager
  only) runs the implementation directly.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache
from typing import Any

import torch

from autotune.core.config import Config
from autotune.core.problem import Problem, next_pow2
from autotune.core.target import Target
from autotune.kernels.common.target import launch_target
from autotune.kernels.mla.backends import split_workspace
from autotune.kernels.mla.op import MLA_DECODE
from autotune.kernels.mla.ref import gathered_attention
from autotune.kernels.serve import served_config
from autotune.kernels.torch_ops import TorchOp, eager, explained, graph_pool_warmup, register

__all__ = ["MIN_CONTEXT_BUCKET", "TORCH_OPS", "WORKSPACES", "context_bucket", "mla_decode", "mla_problem"]

#: The smallest context bucket.
MIN_CONTEXT_BUCKET = 1024
#: How many (shape, config, device, stream) workspaces are kept.
WORKSPACES = 16
_FP8 = {torch.float8_e4m3fn: "fp8e4m3", torch.float8_e4m3fnuz: "fp8e4m3fnuz"}
_workspaces: OrderedDict[tuple[Any, ...], tuple[torch.Tensor | None, torch.Tensor | None]] = OrderedDict()
_problems: dict[tuple[Any, ...], Problem] = {}


def context_bucket(context: int) -> int:
    """The context a table keys a call by: `context` rounded up to a power of two, at least 1024."""
    return max(MIN_CONTEXT_BUCKET, next_pow2(context))


def _kv_name(dtype: torch.dtype, target: Target) -> str:
    if dtype == torch.bfloat16:
        return "bf16"
    name = _FP8[dtype]
    # "fp8e4m3" is the target's own e4m3: e4m3fnuz is named only where it is not (the interpreter)
    if name == "fp8e4m3" and target.arch == "gfx942":
        raise ValueError("gfx942 has no e4m3fn FP8; its cache is float8_e4m3fnuz")
    if name == "fp8e4m3fnuz" and target.arch not in ("gfx942", "interpreter"):
        raise ValueError(f"{target.arch} has no e4m3fnuz FP8 (MI300X's); its cache is float8_e4m3fn")
    return "fp8e4m3" if target.arch == "gfx942" else name


def mla_problem(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    page_table: torch.Tensor,
    latent: int,
    context: int,
    target: Target,
) -> Problem:
    """The problem a call serves (kept per shape): M = B, N = latent, K, the context bucket of `context`."""
    B, H, K = q.shape
    page = kv_cache.shape[1]
    key = (B, H, K, latent, page, kv_cache.dtype, context, target.arch)
    found = _problems.get(key)
    if found is None:
        found = Problem.of(
            "mla_decode", B, latent, K, "bf16", heads=H, context=context_bucket(context),
            kv_dtype=_kv_name(kv_cache.dtype, target), page_size=page,
        )  # fmt: skip
        if len(_problems) >= 4096:
            _problems.clear()
        _problems[key] = found
    return found


def _check(q: Any, kv: Any, table: Any, lens: Any, latent: int, kv_scale: float | None, out: Any) -> None:
    tensors = (q, kv, table, lens)
    if not all(isinstance(t, torch.Tensor) for t in tensors):
        raise TypeError("mla_decode takes tensors q, kv_cache, page_table and context_lens")
    if q.dim() != 3 or q.dtype != torch.bfloat16:
        raise ValueError(f"q must be (B, H, K) bf16, got {tuple(q.shape)} {q.dtype}")
    B, H, K = q.shape
    if kv.dim() != 3 or kv.shape[2] != K or kv.stride(2) != 1:
        raise ValueError(f"kv_cache must be (pages, page_size, {K}) with its last dim contiguous, got "
                         f"{tuple(kv.shape)}")  # fmt: skip
    if kv.dtype != torch.bfloat16 and kv.dtype not in _FP8:
        raise ValueError(f"kv_cache must be bf16, float8_e4m3fn or float8_e4m3fnuz, got {kv.dtype}")
    if (kv.dtype in _FP8) != (kv_scale is not None):
        raise ValueError("an FP8 kv_cache needs its kv_scale, and a bf16 one takes none")
    if table.dim() != 2 or table.shape[0] != B or table.shape[1] < 1 or table.dtype != torch.int32:
        raise ValueError(f"page_table must be ({B}, max_pages) int32, got {tuple(table.shape)} {table.dtype}")
    if lens.dim() != 1 or lens.shape[0] != B or lens.dtype != torch.int32:
        raise ValueError(f"context_lens must be ({B},) int32, got {tuple(lens.shape)} {lens.dtype}")
    rope = K - latent
    if latent < 16 or rope < 16 or latent & (latent - 1) or rope & (rope - 1):
        raise ValueError(f"latent ({latent}) and K - latent ({rope}) must be powers of two >= 16")
    if not (q.device == kv.device == table.device == lens.device):
        raise ValueError("q, kv_cache, page_table and context_lens must be on one device")
    if q.stride(2) != 1:
        raise ValueError("q's last dim must be contiguous")
    if out is not None and (
        not isinstance(out, torch.Tensor) or tuple(out.shape) != (B, H, latent) or out.dtype != torch.bfloat16
        or out.device != q.device or out.stride(2) != 1
    ):  # fmt: skip
        raise ValueError(f"out must be a ({B}, {H}, {latent}) bf16 tensor on {q.device}, last dim contiguous")


def _check_values(kv: torch.Tensor, table: torch.Tensor, lens: torch.Tensor) -> None:
    """The context lengths and the page-table entries each sequence uses, read back once."""
    num_pages, page = kv.shape[0], kv.shape[1]
    capacity = table.shape[1] * page
    pages = (lens.long() + page - 1) // page
    used = torch.arange(table.shape[1], device=table.device)[None, :] < pages[:, None]
    entries = torch.where(used, table, 0)
    bad_entries = ((entries < 0) | (entries >= num_pages)).sum()
    lo, hi, bad = torch.stack([lens.min().long(), lens.max().long(), bad_entries.long()]).tolist()
    if lo < 0:
        raise ValueError(f"context_lens must be >= 0, got {lo}")
    if hi > capacity:
        raise ValueError(f"a context of {hi} tokens is longer than the page table holds "
                         f"({table.shape[1]} pages x {page})")  # fmt: skip
    if bad:
        raise ValueError(
            f"{bad} page-table entr{'y' if bad == 1 else 'ies'} in use out of range [0, {num_pages})"
        )


def _capturing(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()


def _workspace(
    config: Config, problem: Problem, H: int, latent: int, device: torch.device, capturing: bool
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    if int(config["num_kv_splits"]) == 1:
        return None, None
    if capturing or graph_pool_warmup(device):  # the graph's pool: nothing kept past the call
        return split_workspace(config, problem.M, H, latent, device)
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device, stream, problem, config.canonical())
    held = _workspaces.pop(key, None)
    if held is None:
        held = split_workspace(config, problem.M, H, latent, device)
        while len(_workspaces) >= WORKSPACES:
            _workspaces.popitem(last=False)
    _workspaces[key] = held
    return held


@lru_cache(maxsize=64)
def _gluon_run(params: tuple[tuple[str, Any], ...]) -> Any:
    """The Gluon kernel's launch of a config's knobs (kept: it is built once per config)."""
    from autotune.kernels.mla.gluon_launch import gluon_launcher

    return gluon_launcher(dict(params))


def _width(q: Any, latent: int | None) -> int:
    """The value dims: `latent`, else K - 64."""
    return latent if latent is not None else (q.shape[-1] - 64 if isinstance(q, torch.Tensor) else 0)


def _mla_decode_impl(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    sm_scale: float,
    kv_scale: float | None = None,
    latent: int | None = None,
    max_context: int | None = None,
    out: torch.Tensor | None = None,
    target: Target | None = None,
) -> torch.Tensor:
    """autotune::mla_decode (and mla_decode_out with `out`): the checks, the lookup and the launch."""
    from autotune.kernels.mla.kernel import launcher

    width = _width(q, latent)
    _check(q, kv_cache, page_table, context_lens, width, kv_scale, out)
    B, H, _ = q.shape
    if B == 0 or H == 0:
        return q.new_empty((B, H, width)) if out is None else out
    capturing = _capturing(q.device)
    if not capturing:
        _check_values(kv_cache, page_table, context_lens)
    tgt = target or launch_target()
    capacity = page_table.shape[1] * kv_cache.shape[1]
    problem = mla_problem(q, kv_cache, page_table, width, min(max_context or capacity, capacity), tgt)
    config = served_config(MLA_DECODE, problem, tgt)  # never aiter's: it is not served
    if out is None:
        out = q.new_empty((B, H, width))
    if config.backend == "torch":  # the gathered baseline, where a table measured it fastest
        gathered_attention(q, kv_cache, page_table, context_lens, out, sm_scale, kv_scale)
        return out
    part, lse = _workspace(config, problem, H, width, q.device, capturing)
    params = {k: v for k, v in config.items() if k != "backend"}
    if config.backend == "gluon":  # (Hopper: a table's pick, or the default where it was measured to win)
        run = _gluon_run(tuple(sorted(params.items())))
    else:
        run = launcher(params, is_amd=tgt.is_amd, interpret=tgt.interpreter)
    run(
        q, kv_cache, page_table, context_lens, out, part, lse, sm_scale, 1.0 if kv_scale is None else kv_scale
    )
    return out


def _mla_decode_out_impl(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    sm_scale: float,
    kv_scale: float | None,
    latent: int | None,
    max_context: int | None,
    out: torch.Tensor,
) -> None:
    _mla_decode_impl(q, kv_cache, page_table, context_lens, sm_scale, kv_scale, latent, max_context, out)


def _check_call(q: Any, kv: Any, table: Any, lens: Any, kv_scale: Any, latent: Any, out: Any = None) -> int:
    """The checks that read no data (a fake's, or for arguments that the op's schema refuses): the value
    dims."""
    width = _width(q, latent)
    _check(q, kv, table, lens, width, kv_scale, out)
    return width


def _mla_decode_fake(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    sm_scale: float,
    kv_scale: float | None = None,
    latent: int | None = None,
    max_context: int | None = None,
) -> torch.Tensor:
    width = _check_call(q, kv_cache, page_table, context_lens, kv_scale, latent)
    return q.new_empty((q.shape[0], q.shape[1], width))


def _mla_decode_out_fake(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    sm_scale: float,
    kv_scale: float | None,
    latent: int | None,
    max_context: int | None,
    out: torch.Tensor,
) -> None:
    _check_call(q, kv_cache, page_table, context_lens, kv_scale, latent, out)


def mla_decode(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    *,
    sm_scale: float,
    kv_scale: float | None = None,
    out: torch.Tensor | None = None,
    latent: int | None = None,
    max_context: int | None = None,
    target: Target | None = None,
) -> torch.Tensor:
    """softmax(q·kᵀ·sm_scale)·v of every sequence and head over its `context_lens[b]` cached tokens, in
    the config the loaded tables give this shape (module docstring).

    `latent`: the value dims (default K − 64); `max_context`: the longest context of the batch where the
    caller knows it (it keys the lookup only). Returns (B, H, latent) bf16, written into `out` when
    given. ValueError for bad input, before any launch. Runs the op autotune::mla_decode
    (autotune::mla_decode_out with `out`); with a `target` (which no op takes: eager only) the
    implementation is called directly."""
    args = (q, kv_cache, page_table, context_lens, sm_scale, kv_scale, latent, max_context)
    if target is not None or eager(q, kv_cache):
        return _mla_decode_impl(*args, out, target)
    try:
        if out is None:
            return _MLA_DECODE(*args)
        _MLA_DECODE_OUT(*args, out)
        return out
    except RuntimeError as exc:  # arguments that the schema refuses (not tensors): the check says why
        raise explained(
            exc, _check_call, q, kv_cache, page_table, context_lens, kv_scale, latent, out
        ) from None


_MLA_ARGS = (
    "Tensor q, Tensor kv_cache, Tensor page_table, Tensor context_lens, float sm_scale, "
    "float? kv_scale=None, int? latent=None, int? max_context=None"
)
#: The ops of this module (`autotune.kernels.torch_ops.register`).
TORCH_OPS = (
    TorchOp(f"mla_decode({_MLA_ARGS}) -> Tensor", _mla_decode_impl, _mla_decode_fake),
    TorchOp(
        f"mla_decode_out({_MLA_ARGS.replace('=None', '')}, Tensor(a!) out) -> ()",
        _mla_decode_out_impl,
        _mla_decode_out_fake,
    ),
)
_MLA_DECODE, _MLA_DECODE_OUT = register(*TORCH_OPS)
