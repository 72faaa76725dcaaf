"""The MLA decode's backends, one record each: "torch" (the gathered baseline, `mla.ref`), "triton"
(the split-KV kernel, `mla.kernel`), on Hopper "gluon" (the split-KV kernel in Gluon, `mla.gluon_kernel`,
with its space in `mla.gluon_space`) and, on ROCm where `import aiter` works, "aiter" (aiter's MLA
decode).

Inputs, in order: q (B, H, K) bf16, kv_cache (pages, page_size, K), page_table (B, max_pages) int32,
context_lens (B,) int32, and the FP8 cache's scale as a 0-d fp32 CPU tensor (None for a bf16 cache).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from autotune.core.backend import Backend, Backends
from autotune.core.config import Config
from autotune.core.op import Inputs, KernelCall, Launch, Recorder
from autotune.core.problem import Problem
from autotune.core.space import SearchSpace
from autotune.core.target import Target
from autotune.kernels.mla.gluon_space import gluon_absent, gluon_runs, gluon_subspace
from autotune.kernels.mla.space import mla_default_config, mla_subspace, spill_exempt

if TYPE_CHECKING:
    import torch

__all__ = ["MLA_BACKENDS", "aiter_version", "mla_space", "sm_scale_of", "split_workspace"]


def sm_scale_of(problem: Problem) -> float:
    """The softmax scale a tuning run uses: 1/sqrt(K) (it changes no timing)."""
    return float(problem.K) ** -0.5


def split_workspace(
    config: Config, B: int, H: int, latent: int, device: Any
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The fp32 partial outputs (B·H·splits·latent) and log-sum-exps (B·H·splits) of `config`'s splits;
    (None, None) with one split."""
    import torch

    splits = int(config["num_kv_splits"])
    if splits == 1:
        return None, None
    part = torch.empty(B * H * splits * latent, device=device, dtype=torch.float32)
    return part, torch.empty(B * H * splits, device=device, dtype=torch.float32)


def _scale(inputs: Inputs) -> float:
    scale = inputs[4] if len(inputs) > 4 else None
    return 1.0 if scale is None else float(scale)


def _triton(
    problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    from autotune.kernels.mla.kernel import JIT_KERNELS, launcher

    q, kv, table, lens = inputs[:4]
    kernels = None if calls is None else (Recorder(JIT_KERNELS[0], calls), Recorder(JIT_KERNELS[1], calls))
    params = {k: v for k, v in config.items() if k != "backend"}
    run = launcher(params, is_amd=target.is_amd, interpret=target.interpreter, kernels=kernels)
    part, lse = split_workspace(config, q.shape[0], q.shape[1], out.shape[2], q.device)
    sm_scale, kv_scale = sm_scale_of(problem), _scale(inputs)

    def launch() -> None:
        run(q, kv, table, lens, out, part, lse, sm_scale, kv_scale)

    return launch


def _gluon(
    problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    from autotune.kernels.mla.gluon_launch import gluon_launcher, jit_kernels

    q, kv, table, lens = inputs[:4]
    params = {k: v for k, v in config.items() if k != "backend"}
    fns = jit_kernels(int(params.get("SCHEDULE", 0)))
    kernels = None if calls is None else (Recorder(fns[0], calls), Recorder(fns[1], calls))
    run = gluon_launcher(params, kernels=kernels)
    part, lse = split_workspace(config, q.shape[0], q.shape[1], out.shape[2], q.device)
    sm_scale, kv_scale = sm_scale_of(problem), _scale(inputs)

    def launch() -> None:
        run(q, kv, table, lens, out, part, lse, sm_scale, kv_scale)

    return launch


def _torch(
    problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    from autotune.kernels.mla.ref import gathered_attention

    q, kv, table, lens = inputs[:4]
    scale = None if len(inputs) < 5 or inputs[4] is None else _scale(inputs)
    sm_scale = sm_scale_of(problem)

    def launch() -> None:
        gathered_attention(q, kv, table, lens, out, sm_scale, scale)

    return launch


def _aiter(
    problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor,
    calls: list[KernelCall] | None = None,
) -> Launch:  # fmt: skip
    """aiter's MLA decode on our page table, turned into its page lists (CSR) here, once."""
    import torch
    from aiter.mla import mla_decode_fwd

    q, kv, table, lens = inputs[:4]
    B, page = q.shape[0], kv.shape[1]
    pages = (lens.long() + page - 1) // page
    indptr = torch.zeros(B + 1, dtype=torch.int32, device=q.device)
    indptr[1:] = torch.cumsum(pages, 0)
    used = torch.arange(table.shape[1], device=q.device)[None, :] < pages[:, None]
    indices = table[used].int()
    last = (lens - (pages - 1).int() * page).int()
    qo_indptr = torch.arange(B + 1, dtype=torch.int32, device=q.device)
    cache = kv.view(kv.shape[0], page, 1, kv.shape[2])
    sm_scale = sm_scale_of(problem)

    def launch() -> None:
        mla_decode_fwd(q, cache, out, qo_indptr, indptr, indices, last, 1, sm_scale=sm_scale)

    return launch


@lru_cache(maxsize=1)
def _aiter_importable() -> bool:
    try:
        import aiter  # noqa: F401
    except Exception:  # absent, or built for another GPU
        return False
    return True


def _runs_aiter(target: Target) -> bool:
    return target.is_amd and not target.interpreter and _aiter_importable()


def aiter_version() -> str:
    """aiter's version text ("aiter absent" where it does not import)."""
    if not _aiter_importable():
        return "aiter absent"
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"aiter {version('aiter')}"
    except PackageNotFoundError:
        return "aiter unknown"


def _torch_version() -> str:
    import torch

    return f"torch {torch.__version__}"


#: The MLA decode's backends. "torch" is the baseline every winner is compared with (served where a table
#: picks it: it reads nothing back, though it holds a copy of every sequence's whole context). "aiter"
#: takes page lists built from the context lengths on the host, so it is measured, not served. "gluon" is
#: the default on Hopper where it was measured to win (`gluon_space.gluon_default`), and serves where a
#: table picks it.
MLA_BACKENDS = Backends(
    "mla_decode",
    (
        Backend("torch", _torch, library=True, modules=("autotune.kernels.mla.ref",), version=_torch_version),
        Backend(
            "triton", _triton, mla_subspace, modules=("autotune.kernels.mla.kernel",), exempt=spill_exempt
        ),
        Backend(
            "gluon",
            _gluon,
            gluon_subspace,
            modules=("autotune.kernels.mla.gluon_launch",),
            runs_on=gluon_runs,
            absent=gluon_absent,
        ),
        Backend("aiter", _aiter, library=True, version=aiter_version, runs_on=_runs_aiter, served=False),
    ),
)


def mla_space(problem: Problem, target: Target, names: tuple[str, ...] | None) -> SearchSpace:
    """The backends named (all of `target`'s for None; ValueError for another) in their declared order,
    the kernel's heuristic default first among its configs."""
    chosen = MLA_BACKENDS.chosen(target, names)
    return _space(problem, target, tuple(chosen))


@lru_cache(maxsize=256)
def _space(problem: Problem, target: Target, records: tuple[Backend, ...]) -> SearchSpace:
    """The space of `records`."""
    default = mla_default_config(problem, target)
    return SearchSpace([r.space(problem, target, default) for r in records])
