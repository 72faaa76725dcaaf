"""Run-time entry points: `gemm(a, b)` and `linear(x, weight, bias)` dispatch through the pinned tables.

Each is a registered torch op (`TORCH_OPS`: autotune::gemm, autotune::gemm_out, autotune::linear; see
`autotune.kernels.torch_ops`), so `torch.compile` and CUDA graphs see one node and the lookup runs at run
time. No tuning happens here. Each call looks its shape up in `autotune.dispatch` (tables from
$AUTOTUNE_TABLES or `autotune.dispatch.load_tables`) and launches the chosen backend and config. A shape
that no table covers runs `GemmOp.fallback_config`: the vendor library (torch.mm: cuBLAS, hipBLASLt; on
the interpreter too) at every M (`FALLBACK_GEMV_ROWS`: the heuristic GEMV default was not safe untuned).
The dispatcher warns once per such shape and logs it for a later sweep.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import torch

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.dispatch import lookup as _lookup
from autotune.kernels.common.target import launch_target
from autotune.kernels.torch_ops import TorchOp, eager, explained, known_zero, register

__all__ = ["TORCH_OPS", "entry_launch", "gemm", "launch_config", "linear"]

_DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
_LAYOUTS = ("nk", "kn")
# Plain tensors and module weights take the fast check; other subclasses the full one.
_TENSOR_TYPES = frozenset((torch.Tensor, torch.nn.Parameter))

# Per-process cache: the config of each shape no table covers.
_fallbacks: dict[tuple[int, int, int, str, str], Config] = {}


def _check(a: Any, b: Any, b_layout: str) -> tuple[int, int, int, str]:
    # Fast path for valid input (every attribute read costs host time); anything unusual falls through to
    # the checks that explain the problem.
    if type(a) in _TENSOR_TYPES and type(b) in _TENSOR_TYPES:
        dt = a.dtype
        dtype = _DTYPE_NAMES.get(dt)
        if dtype is not None and b.dtype is dt:
            sa, sb = a.shape, b.shape
            if len(sa) == 2 and len(sb) == 2:
                M, K = sa
                N, kb = sb if b_layout == "nk" else (sb[1], sb[0])
                if kb == K and M and N and K and b_layout in _LAYOUTS:
                    device = a.get_device()  # -1 on the CPU (and meta: told apart below)
                    if device == b.get_device() and (device >= 0 or (a.is_cpu and b.is_cpu)):
                        return M, N, K, dtype
    return _explain(a, b, b_layout)


def _explain(a: Any, b: Any, b_layout: str) -> tuple[int, int, int, str]:
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        raise TypeError(f"gemm expects two torch.Tensors, got {type(a).__name__} and {type(b).__name__}")
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"gemm expects 2-D tensors, got A {tuple(a.shape)} and B {tuple(b.shape)}")
    dtype = _DTYPE_NAMES.get(a.dtype)
    if dtype is None or b.dtype != a.dtype:
        raise TypeError(f"gemm supports bf16 or fp16 A and B of one dtype, got A {a.dtype} and B {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"A is on {a.device} but B is on {b.device}; put both on one device")
    M, K = a.shape
    if b_layout == "nk":
        N, kb = b.shape
    elif b_layout == "kn":
        kb, N = b.shape
    else:
        raise ValueError(f"b_layout must be 'nk' (B is N x K, nn.Linear's weight) or 'kn', got {b_layout!r}")
    if kb != K:
        raise ValueError(
            f"inner dimensions differ: A is {tuple(a.shape)} (M x K) but B is {tuple(b.shape)} "
            f"({'N x K' if b_layout == 'nk' else 'K x N'})"
        )
    if known_zero(M) or known_zero(N) or known_zero(K):
        raise ValueError(f"empty GEMM: M={M}, N={N}, K={K}")
    return M, N, K, dtype


def launch_config(
    config: Config,
    a: torch.Tensor,
    b: torch.Tensor,
    b_layout: str = "nk",
    target: Target | None = None,
    *,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Runs one explicit config (no lookup) and returns C. Validates the inputs like `gemm`."""
    M, N, K, _ = _check(a, b, b_layout)
    if out is not None:
        _check_out(out, a, M, N)
    return _launch(config, a, b, M, N, K, b_layout, target or launch_target(), out)


def _check_out(out: Any, a: torch.Tensor, M: int, N: int) -> None:
    if type(out) in _TENSOR_TYPES and out.dtype is a.dtype:
        so = out.shape
        if len(so) == 2 and so[0] == M and so[1] == N:
            device = out.get_device()
            if device == a.get_device() and (device >= 0 or out.is_cpu == a.is_cpu):
                return
    _explain_out(out, a, M, N)


def _explain_out(out: Any, a: torch.Tensor, M: int, N: int) -> None:
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
    so = out.shape
    if len(so) == 2 and so[0] == M and so[1] == N and out.dtype == a.dtype and out.device == a.device:
        return
    raise ValueError(
        f"out must be a ({M}, {N}) {a.dtype} tensor on {a.device} (the shape and dtype of C), got "
        f"{tuple(out.shape)} {out.dtype} on {out.device}"
    )


# A launch plan per config: (kind, launch function, workspace slices: SPLIT_K, or 1 without a workspace,
# the most rows of A it takes); kind 0 = the vendor library (torch.mm), 1 = B's strides, 2 = B's layout,
# 3 = torch.mm with TunableOp's pinned solution (`dense.tunableop`).
_Plan = tuple[int, Callable[..., None] | None, int, int]
_plans: dict[Config, _Plan] = {}


def _plan(config: Config, target: Target) -> _Plan:
    """The launch plan of `config` from its backend's record (`dense.backends`), built once per config."""
    plan = _plans.get(config)
    if plan is None:
        from autotune.kernels.dense.backends import GEMM_BACKENDS, KernelLaunch

        record = GEMM_BACKENDS[config.backend]
        rows = sys.maxsize if record.max_m is None else record.max_m
        if record.name == "tunableop":
            plan = (3, None, 1, rows)
        elif record.library:
            plan = (0, None, 1, rows)
        else:
            kernel = record.launch
            assert isinstance(kernel, KernelLaunch), record
            run = kernel.launcher(config, target, None)
            plan = (2 if kernel.descriptors else 1, run, kernel.slices(config), rows)
        _plans[config] = plan
    return plan


def _launch(
    config: Config,
    a: torch.Tensor,
    b: torch.Tensor,
    M: int,
    N: int,
    K: int,
    b_layout: str,
    target: Target,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    return _run(_plans.get(config) or _plan(config, target), a, b, M, N, K, b_layout, out)


def _run(
    plan: _Plan,
    a: torch.Tensor,
    b: torch.Tensor,
    M: int,
    N: int,
    K: int,
    b_layout: str,
    out: torch.Tensor | None,
) -> torch.Tensor:
    kind, run, split_k, _ = plan
    if kind == 0:  # the very call the tuner timed (F.linear can pick another cuBLAS path)
        bt = b.t() if b_layout == "nk" else b
        return torch.mm(a, bt) if out is None else torch.mm(a, bt, out=out)
    if kind == 3:  # torch.mm with the solution a table pinned for this very shape, else plain torch.mm
        return _pinned(a, b, M, N, K, b_layout, out)
    assert run is not None
    c = a.new_empty((M, N)) if out is None else out
    workspace = a.new_empty(split_k * M * N, dtype=torch.float32) if split_k > 1 else None
    if kind == 2:  # the launcher makes dense, aligned copies where descriptors need them
        run(a, b, c, b_layout == "kn", M, N, K, workspace)
    else:
        sb = b.stride()
        if b_layout == "nk":
            run(a, b, c, sb[1], sb[0], M, N, K, workspace)
        else:
            run(a, b, c, sb[0], sb[1], M, N, K, workspace)
    return c


def _pinned(
    a: torch.Tensor, b: torch.Tensor, M: int, N: int, K: int, b_layout: str, out: torch.Tensor | None
) -> torch.Tensor:
    from autotune.kernels.dense import tunableop

    if tunableop.installed_shapes() is None:  # first call: the pins of the tables in use
        from autotune.dispatch import default_dispatcher

        pins = [p for t in default_dispatcher().tables for p in t.pins.get("tunableop", ())]
        tunableop.install(pins, a.device)
    bt = b.t() if b_layout == "nk" else b
    return tunableop.mm(a, bt, tunableop.pin_key(M, N, K, _DTYPE_NAMES[a.dtype], b_layout), out)


def _fallback(M: int, N: int, K: int, dtype: str, b_layout: str, target: Target) -> Config:
    key = (M, N, K, dtype, b_layout)
    config = _fallbacks.get(key)
    if config is None:
        from autotune.kernels.dense.op import GEMM

        config = GEMM.fallback_config(Problem.of("gemm", M, N, K, dtype, layout=b_layout), target)
        _fallbacks[key] = config
    return config


def _gemm_impl(a: Any, b: Any, b_layout: str = "nk", out: torch.Tensor | None = None) -> torch.Tensor:
    """autotune::gemm (and gemm_out with `out`): the checks, the lookup and the launch."""
    M, N, K, dtype = _check(a, b, b_layout)
    if out is not None:
        _check_out(out, a, M, N)
    target = launch_target()
    config = _lookup("gemm", M, N, K, dtype=dtype, layout=b_layout)
    plan = None if config is None else _plans.get(config) or _plan(config, target)
    # a table entry serves no larger M than its kernel takes (a GEMV's: a policy other than round-up can
    # land there): the fallback does
    if plan is None or plan[3] < M:
        plan = _plan(_fallback(M, N, K, dtype, b_layout, target), target)
    return _run(plan, a, b, M, N, K, b_layout, out)


def _gemm_out_impl(a: Any, b: Any, b_layout: str, out: torch.Tensor) -> None:
    _gemm_impl(a, b, b_layout, out)


def _explain_call(a: Any, b: Any, b_layout: Any, out: Any = None) -> tuple[int, int]:
    """The checks of a gemm call (a fake's, or for arguments that the op's schema refuses): (M, N)."""
    M, N, _, _ = _check(a, b, b_layout)
    if out is not None:
        _check_out(out, a, M, N)
    return M, N


def _gemm_fake(a: Any, b: Any, b_layout: str = "nk") -> torch.Tensor:
    return a.new_empty(_explain_call(a, b, b_layout))


def _gemm_out_fake(a: Any, b: Any, b_layout: str, out: torch.Tensor) -> None:
    _explain_call(a, b, b_layout, out)


def gemm(
    a: torch.Tensor, b: torch.Tensor, *, b_layout: str = "nk", out: torch.Tensor | None = None
) -> torch.Tensor:
    """C = A · Bᵀ for B of shape (N, K) (b_layout "nk", nn.Linear's weight) or C = A · B for B (K, N).

    A is (M, K); bf16 or fp16, one dtype for both; the result has A's dtype. The backend and config come
    from the loaded tuned table, else `GemmOp.fallback_config` (torch.mm). `out`, an (M, N) tensor of A's
    dtype on A's device (any strides), receives C and is returned: a caller that keeps its buffers saves
    the allocation's host time. It must not overlap A or B. Runs the op autotune::gemm (autotune::gemm_out
    with `out`): `torch.compile` sees one node, and the lookup runs at run time.
    """
    if eager(a, b):
        return _gemm_impl(a, b, b_layout, out)
    try:
        if out is None:
            return _GEMM(a, b, b_layout)
        _GEMM_OUT(a, b, b_layout, out)
        return out
    except RuntimeError as exc:  # arguments that the schema refuses (not tensors): the check says why
        raise explained(exc, _explain_call, a, b, b_layout, out) from None


def _linear_check(x: Any, weight: Any, bias: Any) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 1:
        raise ValueError("linear expects x as a tensor of shape (..., K)")
    if bias is not None and isinstance(weight, torch.Tensor):  # no launch
        if not isinstance(bias, torch.Tensor) or bias.shape != (weight.shape[0],):
            got = tuple(bias.shape) if isinstance(bias, torch.Tensor) else type(bias).__name__
            raise ValueError(f"bias must have shape ({weight.shape[0]},), got {got}")
        if bias.device != x.device:
            raise ValueError(f"bias is on {bias.device}, x on {x.device}; put both on one device")


def _linear_explain(x: Any, weight: Any, bias: Any) -> int:
    """The checks of a linear call (a fake's, or for arguments that the op's schema refuses): N."""
    _linear_check(x, weight, bias)
    return _check(x.reshape(-1, x.shape[-1]), weight, "nk")[1]


def _linear_impl(x: Any, weight: Any, bias: torch.Tensor | None = None) -> torch.Tensor:
    """autotune::linear: x (..., K) as a 2-D A through `_gemm_impl`, then the bias."""
    _linear_check(x, weight, bias)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, x.shape[-1])
    if not x2.is_contiguous():
        x2 = x2.contiguous()
    y = _gemm_impl(x2, weight, "nk")
    if bias is not None:
        y += bias
    return y.reshape(*lead, weight.shape[0])


def _linear_fake(x: Any, weight: Any, bias: torch.Tensor | None = None) -> torch.Tensor:
    return x.new_empty((*x.shape[:-1], _linear_explain(x, weight, bias)))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """`torch.nn.functional.linear` through the tuned GEMM: x (..., K), weight (N, K), bias (N,). Runs the
    op autotune::linear."""
    if eager(x, weight):
        return _linear_impl(x, weight, bias)
    if torch.compiler.is_compiling():
        return _linear_compiled(x, weight, bias)
    try:
        return _LINEAR(x, weight, bias)
    except RuntimeError as exc:  # arguments that the schema refuses (not tensors): the check says why
        raise explained(exc, _linear_explain, x, weight, bias) from None


def _linear_compiled(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`linear` as `torch.compile` traces it: the output allocated in the graph and written by
    autotune::gemm_out, so that inductor plans (and reuses) its buffer as it does its own matmul's, the
    bias added by the graph (fused with what follows)."""
    _linear_check(x, weight, bias)
    x2 = x.reshape(-1, x.shape[-1]).contiguous()
    out = x2.new_empty((x2.shape[0], weight.shape[0]))
    _GEMM_OUT(x2, weight, "nk", out)
    y = out if bias is None else out + bias
    return y.reshape(*x.shape[:-1], weight.shape[0])


#: The ops of this module (`autotune.kernels.torch_ops.register`).
TORCH_OPS = (
    TorchOp('gemm(Tensor a, Tensor b, str b_layout="nk") -> Tensor', _gemm_impl, _gemm_fake),
    TorchOp(
        "gemm_out(Tensor a, Tensor b, str b_layout, Tensor(a!) out) -> ()", _gemm_out_impl, _gemm_out_fake
    ),
    TorchOp("linear(Tensor x, Tensor weight, Tensor? bias=None) -> Tensor", _linear_impl, _linear_fake),
)
_GEMM, _GEMM_OUT, _LINEAR = register(*TORCH_OPS)


def entry_launch(
    problem: Problem, target: Target, inputs: Any, out: torch.Tensor, config: Config | None = None
) -> Callable[[], None]:
    """A launch of the entry point's own call, `gemm(a, b, b_layout=problem.layout, out=out)`, lookup and
    fallback included on every call (`autotune.kernels.served_launch`). It runs on the process's launch
    target: ValueError where `target` is another GPU, or the inputs or `out` are not `problem`'s."""
    running = launch_target()
    if running.device_key() != target.device_key():
        raise ValueError(f"gemm runs on {running}, not on {target}: its served config would be another's")
    a, b = inputs
    layout = problem.layout
    M, N, K, dtype = _check(a, b, layout)
    given = Problem.of("gemm", M, N, K, dtype, layout=layout)
    if given != problem:
        raise ValueError(f"the inputs are those of {given}, not {problem}")
    _check_out(out, a, M, N)

    def launch() -> None:
        gemm(a, b, b_layout=layout, out=out)

    return launch
