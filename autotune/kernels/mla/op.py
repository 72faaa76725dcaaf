"""The MLA decode op: DeepSeek's absorbed multi-head latent attention over a paged latent KV cache."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from autotune.core.backend import Backend
from autotune.core.config import Config
from autotune.core.op import Inputs, KernelCall, Launch
from autotune.core.problem import DTYPE_BYTES, Problem, ProblemRules, cdiv, normalize_dtype
from autotune.core.space import SearchSpace
from autotune.core.target import Target
from autotune.engine.verdicts import first_passing
from autotune.kernels.mla.backends import MLA_BACKENDS, mla_space
from autotune.kernels.mla.gluon_space import gluon_default
from autotune.kernels.mla.space import mla_default_candidates, own

if TYPE_CHECKING:
    import torch

__all__ = ["KV_DTYPES", "MLA_DECODE", "MlaDecodeOp", "cache_dtype"]

#: The cache dtypes: bf16, the target's FP8 e4m3 (e4m3fnuz on gfx942, e4m3fn elsewhere), or e4m3fnuz.
KV_DTYPES = ("bf16", "fp8e4m3", "fp8e4m3fnuz")
_TOLERANCE = {"bf16": 2e-2, "fp8": 5e-2}


def cache_dtype(name: str, arch: str) -> torch.dtype:
    """The torch dtype of cache dtype `name` on `arch` (ValueError for e4m3fnuz off gfx942)."""
    import torch

    from autotune.kernels.common.formats import fp8_dtype

    return torch.bfloat16 if name == "bf16" else fp8_dtype(name, arch)


def _is_pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


class MlaDecodeOp(ProblemRules):
    """MLA decode: out (B, H, N) = softmax(q·kᵀ·sm_scale)·v for each sequence, where q is (B, H, K) and
    the keys are a paged cache's rows (K = N latent + K−N RoPE dims) and the values their latent part.

    A problem is M = B sequences (the run-time dimension tables serve as M ranges), N the latent dims
    (512), K the query/key dims (576), queries and output bf16 (the problem's dtypes), and the parameters
    `heads`, `context` (the tokens of every sequence; at run time a bucket, see `api`), `kv_dtype` (the
    cache's: bf16, fp8e4m3 with a per-tensor scale) and `page_size` (tokens a page: a layout choice, so
    a spec that lists several sizes has the fastest one reported per shape). Backends
    (`backends.MLA_BACKENDS`): "torch" (the baseline), "triton" (the split-KV kernel), "aiter" (ROCm).
    Stateless and thread-safe.
    """

    name = "mla_decode"
    layer = "mla_attention"
    params: ClassVar[dict[str, type]] = {"context": int, "heads": int, "kv_dtype": str, "page_size": int}
    spec_keys = frozenset(params)
    layout_params = ("page_size",)

    # -- problems ----------------------------------------------------------------------------------------

    def example_problem(self, op: str) -> Problem:
        """4 sequences of 256 tokens, 16 heads, DeepSeek-V3's latent sizes, bf16 cache in 16-token pages."""
        return Problem.of(op, 4, 512, 576, heads=16, context=256, kv_dtype="bf16", page_size=16)

    def validate_problem(self, problem: Problem) -> None:
        """bf16 queries; N and K − N powers of two of at least 16; positive heads, context, page size."""
        super().validate_problem(problem)
        heads, context, kv, page = own(problem)
        if problem.layout != "nk":
            raise ValueError("op mla_decode has no `layout` (its cache is pages x page_size x K)")
        if (problem.dtype_a, problem.dtype_b, problem.dtype_out) != ("bf16",) * 3:
            raise ValueError(f"mla_decode takes bf16 queries and writes bf16, got {problem.dtype_a}")
        rope = problem.K - problem.N
        if not (_is_pow2(problem.N) and problem.N >= 16 and rope >= 16 and _is_pow2(rope)):
            raise ValueError(
                f"mla_decode needs N (latent dims) and K - N (RoPE dims) powers of two >= 16, "
                f"got N={problem.N}, K={problem.K}"
            )
        if min(heads, context, page) < 1:
            raise ValueError(f"heads, context and page_size must be positive, got {heads}, {context}, {page}")
        if kv not in KV_DTYPES:
            raise ValueError(f"mla_decode caches are {', '.join(KV_DTYPES)}, not {kv!r}")

    def problem_flops(self, problem: Problem) -> float:
        """Scores (K) and the weighted sum (N) for every (sequence, head, token)."""
        heads, context, _, _ = own(problem)
        return 2.0 * problem.M * heads * context * (problem.K + problem.N)

    def problem_bytes(self, problem: Problem) -> float:
        """The cache rows of every sequence, its page-table entries, the queries in, the output out."""
        heads, context, kv, page = own(problem)
        B = problem.M
        cache = B * context * problem.K * DTYPE_BYTES[kv]
        return float(cache + B * cdiv(context, page) * 4 + B * heads * (problem.K + problem.N) * 2)

    def describe_problem(self, problem: Problem) -> str:
        heads, context, kv, page = own(problem)
        p = problem
        return f"mla_decode B={p.M} H={heads} context={context} N={p.N} K={p.K} {kv} page={page}"

    def label(self, problem: Problem) -> str:
        heads, context, kv, page = own(problem)
        return f"B{problem.M} ctx{context} H{heads} {kv} p{page}"

    def spec_options(self, table: Mapping[str, Any], dtype: str) -> dict[str, Any]:
        """`heads`, `context` and `page_size` (an int or a list each) and `kv_dtype` (default: `dtype`;
        a name or a list)."""
        if dtype != "bf16":
            raise ValueError(f"op mla_decode takes bf16 queries, not {dtype}")
        given = dict(table)
        kv = given.get("kv_dtype", dtype)
        names = kv if isinstance(kv, list) else [kv]
        if not names or not all(isinstance(n, str) for n in names):
            raise ValueError("`kv_dtype` must be a dtype name or a non-empty list of them")
        given["kv_dtype"] = [normalize_dtype(n) for n in names]
        return super().spec_options(given, dtype)

    def predict_us(self, problem: Problem, config: Any, target: Any, features: Any = None) -> float | None:
        from autotune.kernels.mla.cost import mla_us

        return mla_us(problem, config, target)

    # -- the op --------------------------------------------------------------------------------------------

    def backends(self, target: Target) -> tuple[str, ...]:
        return MLA_BACKENDS.names(target)

    def backend(self, name: str) -> Backend:
        return MLA_BACKENDS[name]

    def source_hash(self, backend: str) -> str:
        return MLA_BACKENDS[backend].source_hash()

    def space(self, problem: Problem, target: Target, backends: Sequence[str] | None = None) -> SearchSpace:
        self.check_problem(problem)
        return mla_space(problem, target, None if backends is None else tuple(backends))

    def default_candidates(self, problem: Problem, target: Target) -> tuple[Config, ...]:
        """The Gluon kernel's first config where it is the default on Hopper (`gluon_default`), then the
        Triton kernel's candidates."""
        gluon = gluon_default(problem, target)
        return (*(() if gluon is None else (gluon,)), *mla_default_candidates(problem, target))

    def default_config(self, problem: Problem, target: Target) -> Config:
        """The first of `default_candidates` whose binary passes the static checks on `target`."""
        return first_passing(self, problem, target, self.default_candidates(problem, target))

    def fallback_config(self, problem: Problem, target: Target) -> Config:
        """The heuristic default: there is no vendor library on NVIDIA, aiter is not served, and the
        baseline copies every sequence's context (module `backends`)."""
        return self.default_config(problem, target)

    def check_problem(self, problem: Problem) -> None:
        if problem.op != self.name:
            raise ValueError(f"MlaDecodeOp got a {problem.op} problem")

    def make_inputs(self, problem: Problem, device: str, seed: int) -> Inputs:
        import torch

        from autotune.kernels.common.formats import device_arch
        from autotune.kernels.mla.ref import paged_inputs

        self.check_problem(problem)
        heads, context, kv, page = own(problem)
        dtype = cache_dtype(kv, device_arch(device))
        q, cache, table, lens, scale = paged_inputs(
            heads, problem.N, problem.K - problem.N, page, [context] * problem.M, kv_dtype=dtype,
            device=device, seed=seed,
        )  # fmt: skip
        return (q, cache, table, lens, None if scale is None else torch.tensor(scale))  # type: ignore[return-value]

    def make_output(self, problem: Problem, device: str) -> torch.Tensor:
        import torch

        return torch.empty(problem.M, own(problem)[0], problem.N, device=device, dtype=torch.bfloat16)

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        from autotune.kernels.mla.backends import sm_scale_of
        from autotune.kernels.mla.ref import mla_reference

        q, cache, table, lens, scale = inputs
        kv_scale = None if scale is None else float(scale)
        return mla_reference(q, cache, table, lens, sm_scale_of(problem), problem.N, kv_scale)

    def tolerance(self, problem: Problem) -> float:
        """bf16 output rounding; FP8 (the queries too with Q_FP8): wider."""
        return _TOLERANCE["fp8" if own(problem)[2].startswith("fp8") else "bf16"]

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        return MLA_BACKENDS[config.backend].launch(problem, config, target, inputs, out)

    def kernel_calls(self, problem: Problem, config: Config, target: Target) -> list[KernelCall]:
        import torch

        record = MLA_BACKENDS[config.backend]
        if record.library:
            return []
        self.check_problem(problem)
        heads, context, kv, page = own(problem)
        B, N, K = problem.M, problem.N, problem.K
        pages = cdiv(context, page)

        def meta(*shape: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.empty(shape, dtype=dtype, device="meta")

        arch = "interpreter" if target.interpreter else target.arch
        scale = None if kv == "bf16" else torch.tensor(1.0)
        cache = meta(B * pages + 1, page, K, dtype=cache_dtype(kv, arch))
        inputs = (meta(B, heads, K, dtype=torch.bfloat16), cache, meta(B, pages, dtype=torch.int32),
                  meta(B, dtype=torch.int32), scale)  # fmt: skip
        calls: list[KernelCall] = []
        record.launch(problem, config, target, inputs, meta(B, heads, N, dtype=torch.bfloat16), calls)()
        return calls


MLA_DECODE = MlaDecodeOp()
