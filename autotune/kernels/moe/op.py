"""The fused MoE op: inputs with realistic routing, reference, tolerance, search space and launches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar

from autotune.core.backend import Backend
from autotune.core.config import Config
from autotune.core.op import Inputs, KernelCall, Launch
from autotune.core.problem import DTYPE_BYTES, Problem, ProblemRules, normalize_dtype
from autotune.core.space import SearchSpace
from autotune.core.target import Target
from autotune.kernels.common.formats import MX_BLOCK
from autotune.kernels.common.target import mx_native
from autotune.kernels.moe.backends import fused_launch, moe_backends, moe_space
from autotune.kernels.moe.params import PARAMS, UNKNOWN_K, UNKNOWN_TOPK, experts, experts_touched
from autotune.kernels.moe.space import FP8_BLOCK, moe_default_candidates, moe_default_config

if TYPE_CHECKING:
    import torch

__all__ = ["MOE", "MXFP4", "MoeOp", "mx_emulated"]

_ACT_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}
_TOLERANCE = {"bf16": 2e-2, "fp16": 5e-3}
_FP8_TOLERANCE = 5e-2
#: MXFP4 weights: the problem's `dtype_b`, and the name a spec or `Problem.of` may give it.
MXFP4 = "fp4e2m1"
_WEIGHT_ALIASES = {"mxfp4": MXFP4}


def _act_dtype(name: str) -> torch.dtype:
    import torch

    try:
        return getattr(torch, _ACT_DTYPES[name])
    except KeyError:
        raise ValueError(f"moe takes bf16 or fp16 activations, not {name}") from None


class MoeOp(ProblemRules):
    """The fused MoE MLP of M tokens over E experts with top-k routing.

    Inputs: x (M, K), w1 (E, 2N, K) (gate rows, then up rows), w2 (E, K, N), the routing (weights and
    expert ids, (M, topk)) and, for FP8 weights (`dtype_b` "fp8e4m3"), their 128x128 block scales; for
    MXFP4 weights (`dtype_b` "fp4e2m1", named "mxfp4" in specs; bf16 activations) packed e2m1 w1
    (E, 2N, K/2), w2 (E, K, N/2) and their e8m0 scales per 32 along K (`moe.ref`), run natively on gfx950
    and emulated elsewhere (`mx_emulated`).
    Routing is drawn from seeded random logits, uniform over experts (`zipf` 0) or skewed so that the
    expected load of the r-th busiest expert falls as 1/r^zipf. Backends (`backends.moe_backends`):
    "triton" (the fused kernel, vLLM's parameter names) and "torch" (a loop over experts with torch
    matmuls: the baseline).
    """

    name = "moe"
    layer = "experts"
    #: E (experts) and topk (experts per token): every problem names both (`params.experts` reads them).
    params: ClassVar[dict[str, type]] = PARAMS
    #: bf16, FP8 and MXFP4 weights of one shape are three families of a table (`Problem.table_params`).
    key_b_dtype = True

    def __init__(self, zipf: float = 0.0) -> None:
        if zipf < 0:
            raise ValueError(f"zipf must be >= 0, got {zipf}")
        self.zipf = zipf
        self.records = moe_backends(zipf)

    def backends(self, target: Target) -> tuple[str, ...]:
        return self.records.names(target)

    def backend(self, name: str) -> Backend:
        return self.records[name]

    def source_hash(self, backend: str) -> str:
        """The code's hash; the routing skew is part of it (timings under another routing are other
        results), so a uniform and a skewed sweep of one problem never mix."""
        return self.records[backend].source_hash()

    def space(self, problem: Problem, target: Target, backends: Sequence[str] | None = None) -> SearchSpace:
        self.check_problem(problem)
        return moe_space(problem, target, self.records, backends)

    def default_candidates(self, problem: Problem, target: Target) -> tuple[Config, ...]:
        return moe_default_candidates(problem, target)

    def default_config(self, problem: Problem, target: Target) -> Config:
        return moe_default_config(problem, target)

    def fallback_config(self, problem: Problem, target: Target) -> Config:
        """Always the heuristic default: the "torch" backend is a per-expert loop, a baseline to measure
        against, not a vendor library to fall back on."""
        return moe_default_config(problem, target)

    def layer_problem(self, op: str, M: int, shape: Any, dtype: str, weights: str | None) -> Problem:
        """The routed experts of one rank: `shape.E` experts of N x K, top `shape.topk`."""
        return Problem.of(op, M, shape.N, shape.K, dtype, weights, E=shape.E, topk=shape.topk)

    def example_problem(self, op: str) -> Problem:
        """16 tokens, 8 experts of 256 x 512, top 2."""
        return Problem.of("moe", 16, 256, 512, E=8, topk=2)

    def validate_problem(self, problem: Problem) -> None:
        """topk >= 1 experts per token, of E >= topk."""
        E, topk = experts(problem)
        if topk < 1:
            raise ValueError(f"a moe problem needs topk >= 1, got {topk}")
        if topk > E:
            raise ValueError(f"a moe problem needs E >= topk (experts per token), got E={E}, topk={topk}")
        if problem.layout != "nk":
            raise ValueError("op moe has no `layout` (its weights are (E, N, K))")
        if problem.dtype_b == MXFP4:
            _check_mxfp4(problem)

    def unknown_twin(self, problem: Problem) -> Problem:
        """The problem of its experts and N whose K and top-k a vLLM file left unknown (`UNKNOWN_K` and
        `UNKNOWN_TOPK`)."""
        E, _ = experts(problem)
        return replace(problem, K=UNKNOWN_K, extra=(("E", E), ("topk", UNKNOWN_TOPK)))

    def problem_dtypes(self, dtype: str, variant: str | None = None) -> tuple[str, str, str]:
        """Activations and output `dtype`; weights `variant` ("mxfp4" is MXFP4: "fp4e2m1"), else `dtype`."""
        weights = _WEIGHT_ALIASES.get(str(variant).lower(), variant) if variant else dtype
        return dtype, weights, dtype

    def problem_flops(self, problem: Problem) -> float:
        """Both projections of every (token, expert) pair: 2·N·K for gate and up, N·K for down, times 2."""
        return 6.0 * problem.M * experts(problem)[1] * problem.N * problem.K

    def kernel_rows(self, problem: Problem) -> int:
        """A row per token and expert it is routed to: M x topk."""
        return problem.M * experts(problem)[1]

    def problem_bytes(self, problem: Problem) -> float:
        """The weights of the experts uniform routing touches, the tokens in, the result out."""
        touched = experts_touched(problem)
        w = touched * 3 * problem.N * problem.K * DTYPE_BYTES[problem.dtype_b]
        if problem.dtype_b == MXFP4:  # one e8m0 byte per 32 weights
            w += touched * 3 * problem.N * problem.K / MX_BLOCK
        tokens = problem.M * problem.K * (DTYPE_BYTES[problem.dtype_a] + DTYPE_BYTES[problem.dtype_out])
        return float(w + tokens)

    #: A [[sweep]] table of op "moe": `e` (experts on this rank, an int or a list), `topk`, `weights`
    #: (the activations' dtype, default, "fp8e4m3": 128x128 block scales, or "mxfp4": e2m1 with e8m0
    #: scales per 32, bf16 activations) and `zipf` (routing skew).
    spec_keys = frozenset({"e", "topk", "weights", "zipf"})

    def spec_options(self, table: Mapping[str, Any], dtype: str) -> dict[str, Any]:
        for key in ("e", "topk"):
            if key not in table:
                raise ValueError(f"op moe needs `{key}`")
        es = table["e"] if isinstance(table["e"], list) else [table["e"]]
        if not es:
            raise ValueError("`e` must be a positive integer or a non-empty list of them")
        es_t = tuple(_positive(v, "e") for v in es)
        topk = _positive(table["topk"], "topk")
        for e in es_t:
            if e < topk:
                raise ValueError(f"topk {topk} is more than the {e} experts (`e`)")
        value = table.get("weights", dtype)
        if not isinstance(value, str):
            raise ValueError(f"`weights` must be a str, got {value!r}")
        weights = normalize_dtype(_WEIGHT_ALIASES.get(value.lower(), value))
        if weights not in (dtype, "fp8e4m3", MXFP4):
            raise ValueError(f"moe `weights` are {dtype}, fp8e4m3 or mxfp4, not {weights}")
        if weights == MXFP4 and dtype != "bf16":
            raise ValueError(f"moe `weights` mxfp4 take bf16 activations, not {dtype}")
        zipf = table.get("zipf", 0.0)
        if isinstance(zipf, bool) or not isinstance(zipf, (int, float)) or zipf < 0:
            raise ValueError(f"`zipf` must be a number >= 0, got {zipf!r}")
        return {"e": es_t, "topk": topk, "weights": weights, "zipf": float(zipf)}

    def spec_problems(
        self,
        op: str,
        ms: Sequence[int],
        nks: Sequence[tuple[int, int]],
        layouts: Sequence[str],
        dtype: str,
        options: Mapping[str, Any],
    ) -> list[Problem]:
        topk, weights = options["topk"], options["weights"]
        return [
            Problem.of(op, m, n, k, dtype, weights, E=e, topk=topk, layout=layout)
            for e in options["e"]
            for layout in layouts
            for n, k in nks
            for m in ms
        ]

    def tuning_op(self, options: Mapping[str, Any]) -> MoeOp:
        """An op with the routing skew `zipf` of the options (itself where there is none)."""
        zipf = float(options.get("zipf", 0.0) or 0.0)
        return self if zipf == self.zipf else MoeOp(zipf=zipf)

    def predict_us(self, problem: Problem, config: Any, target: Any, features: Any = None) -> float | None:
        """The fused MoE's cost model (`autotune.kernels.moe.cost`)."""
        from autotune.kernels.moe.cost import moe_us

        return moe_us(problem, config, target, features)

    def label(self, problem: Problem) -> str:
        p, (E, topk) = problem, experts(problem)
        weights = "" if p.dtype_b == p.dtype_a else f" w:{p.dtype_b}"
        return f"{p.M}x{p.N}x{p.K} E{E} top{topk} {p.dtype}{weights}"

    def describe_problem(self, problem: Problem) -> str:
        p, (E, topk) = problem, experts(problem)
        weights = "" if p.dtype_b == p.dtype_a else f" weights {p.dtype_b}"
        return f"moe M={p.M} N={p.N} K={p.K} E={E} topk={topk} {p.dtype_a}{weights}"

    def check_problem(self, problem: Problem) -> None:
        if problem.op != "moe":
            raise ValueError(f"MoeOp got a {problem.op} problem")
        _act_dtype(problem.dtype_a)
        if problem.dtype_out != problem.dtype_a:
            raise ValueError(f"moe writes its output in the activation dtype, got {problem}")
        if problem.dtype_b not in (problem.dtype_a, "fp8e4m3", MXFP4):
            raise ValueError(
                f"moe weights are {problem.dtype_a}, fp8e4m3 (128x128 blocks) or fp4e2m1 (mxfp4), "
                f"not {problem.dtype_b}"
            )
        if problem.dtype_b == MXFP4:
            _check_mxfp4(problem)
        if problem.dtype_b == "fp8e4m3" and (problem.N % FP8_BLOCK or problem.K % FP8_BLOCK):
            raise ValueError(
                f"FP8 block-scaled weights need N and K multiples of {FP8_BLOCK}, "
                f"got N={problem.N}, K={problem.K}"
            )

    def make_inputs(self, problem: Problem, device: str, seed: int) -> Inputs:
        import torch

        from autotune.kernels.moe.ref import (
            quantize_fp8_weight_blockwise,
            quantize_mxfp4_weight,
            route,
            routing_logits,
        )

        self.check_problem(problem)
        (M, N, K), (E, topk) = (problem.M, problem.N, problem.K), experts(problem)
        gen = torch.Generator(device=device).manual_seed(seed)
        dtype = _act_dtype(problem.dtype_a)

        def randn(*shape: int, scale: float) -> torch.Tensor:
            return (torch.randn(*shape, generator=gen, device=device) * scale).to(dtype)

        x = randn(M, K, scale=1.0)
        w1 = randn(E, 2 * N, K, scale=K**-0.5)
        w2 = randn(E, K, N, scale=N**-0.5)
        # the routing is drawn on the CPU (the same tokens go to the same experts on every device)
        routing_gen = torch.Generator().manual_seed(seed)
        logits = routing_logits(M, E, zipf=self.zipf, generator=routing_gen, device=device)
        weights, ids = route(logits, topk)
        if problem.dtype_b == MXFP4:
            w1q, w1s = quantize_mxfp4_weight(w1)
            w2q, w2s = quantize_mxfp4_weight(w2)
            return (x, w1q, w2q, weights, ids, w1s, w2s)
        if problem.dtype_b != "fp8e4m3":
            return (x, w1, w2, weights, ids, None, None)  # type: ignore[return-value]
        fp8 = _fp8_dtype(device)
        w1q, w1s = quantize_fp8_weight_blockwise(w1, (FP8_BLOCK, FP8_BLOCK), fp8)
        w2q, w2s = quantize_fp8_weight_blockwise(w2, (FP8_BLOCK, FP8_BLOCK), fp8)
        return (x, w1q, w2q, weights, ids, w1s, w2s)

    def make_output(self, problem: Problem, device: str) -> torch.Tensor:
        import torch

        return torch.empty(problem.M, problem.K, device=device, dtype=_act_dtype(problem.dtype_out))

    def reference(self, problem: Problem, inputs: Inputs) -> torch.Tensor:
        from autotune.kernels.moe.ref import moe_reference

        x, w1, w2, weights, ids, w1s, w2s = inputs
        block = [FP8_BLOCK, FP8_BLOCK] if w1s is not None and problem.dtype_b != MXFP4 else None
        return moe_reference(x, w1, w2, weights, ids, w1_scale=w1s, w2_scale=w2s, block_shape=block)

    def tolerance(self, problem: Problem) -> float:
        """bf16/fp16: the output dtype's rounding. FP8 weights: wider, as the intermediate is quantized
        again per 1x128 group: where the kernel's fp32 sums round a group's largest element to another
        bf16 than the reference's do, the whole group gets another scale (one row of 128 columns for
        DeepSeek-V3 at TP16). A correct kernel stays within it (docs/notes/2026-11-22-moe.md)."""
        if problem.dtype_b == "fp8e4m3":
            return _FP8_TOLERANCE
        return _TOLERANCE[problem.dtype_out]

    #: `fused_moe` takes a config: a config of the MoE is timed through the entry point, with the per-call
    #: work it does besides the kernels (the routing's block alignment on the device).
    entry_takes_config = True

    #: The module of the op's run-time entry point, whose `entry_launch` launches its own call
    #: (`autotune.kernels.served_launch`); named, not imported, so that the op needs no torch.
    entry_module = "autotune.kernels.moe.api"
    #: The module of the op's parts of other projects' files (vLLM's and SGLang's config files, aiter's
    #: tuned fused-MoE CSV, vLLM's fallback rule, the vllm and sglang exports): named, not imported (it
    #: imports the database).
    format_modules = ("autotune.kernels.moe.formats",)

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        return self.records[config.backend].launch(problem, config, target, inputs, out)

    def kernel_calls(self, problem: Problem, config: Config, target: Target) -> list[KernelCall]:
        import torch

        from autotune.kernels.moe.ref import align_block_size, route, routing_logits

        if self.records[config.backend].library:
            return []
        self.check_problem(problem)
        (M, N, K), (E, topk) = (problem.M, problem.N, problem.K), experts(problem)
        act = _act_dtype(problem.dtype_a)
        fp8, mx = problem.dtype_b == "fp8e4m3", problem.dtype_b == MXFP4
        wdtype = _fp8_dtype("cuda", target) if fp8 else torch.uint8 if mx else act
        pack = 2 if mx else 1
        # The routing is real (it decides the padded lengths the launches get) and aligned here on the
        # CPU; every tensor the launches get is on the meta device: shapes and strides, no data, so
        # recording costs nothing (the FP8 activation quantization between the GEMMs included).
        x, out = _phantom((M, K), act), _phantom((M, K), act)
        w1, w2 = _phantom((E, 2 * N, K // pack), wdtype), _phantom((E, K, N // pack), wdtype)
        gen = torch.Generator().manual_seed(0)
        weights, ids = route(routing_logits(M, E, zipf=self.zipf, generator=gen), topk)
        sorted_ids, expert_ids, num_padded = align_block_size(ids, int(config["BLOCK_SIZE_M"]), E)
        alignment = (sorted_ids.to("meta"), expert_ids.to("meta"), num_padded)
        scales: tuple[Any, Any] = (None, None)
        if fp8:
            nb, kb = -(-N // FP8_BLOCK), -(-K // FP8_BLOCK)
            scales = (_phantom((E, 2 * nb, kb), torch.float32), _phantom((E, kb, nb), torch.float32))
        elif mx:
            g = MX_BLOCK
            scales = (_phantom((E, 2 * N, K // g), torch.uint8), _phantom((E, K, N // g), torch.uint8))
        calls: list[KernelCall] = []
        inputs = (x, w1, w2, weights.to("meta"), ids.to("meta"), *scales)
        run = fused_launch(config, target, inputs, out, calls=calls, alignment=alignment)
        run()
        return main_first(calls)


def main_first(calls: list[KernelCall]) -> list[KernelCall]:
    """`calls` in launch order, except that the GEMMs come before the elementwise launches (activation
    quantization, SiLU·up): the first call is the main kernel, the one whose registers, shared memory and
    matrix instructions a compile-only check reads."""
    from autotune.kernels.moe.kernel import act_quant_kernel, silu_mul_kernel

    return sorted(calls, key=lambda call: call.fn is act_quant_kernel or call.fn is silu_mul_kernel)


def _phantom(shape: tuple[int, ...], dtype: Any) -> Any:
    """A tensor of `shape` on the meta device: what a recorded launch needs, without data."""
    import torch

    return torch.empty(shape, dtype=dtype, device="meta")


def _fp8_dtype(device: str, target: Target | None = None) -> torch.dtype:
    """e4m3fnuz on gfx942 (MI300X's FP8), e4m3fn elsewhere."""
    import torch

    arch = target.arch if target is not None else ""
    if not arch and device != "cpu" and torch.cuda.is_available() and getattr(torch.version, "hip", None):
        arch = str(getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")).split(":")[0]
    return torch.float8_e4m3fnuz if arch == "gfx942" else torch.float8_e4m3fn


def _check_mxfp4(problem: Problem) -> None:
    if problem.dtype_a != "bf16" or problem.N % MX_BLOCK or problem.K % MX_BLOCK:
        raise ValueError(
            f"MXFP4 weights take bf16 activations and N and K multiples of {MX_BLOCK}, got "
            f"{problem.dtype_a}, N={problem.N}, K={problem.K}"
        )


def mx_emulated(problem: Problem, target: Target) -> bool:
    """Whether `problem` runs MXFP4 weights emulated on `target` (no MX instructions: the kernel
    dequantizes each weight tile to bf16 in registers), as the MX GEMMs are there; False for other
    weights and where `tl.dot_scaled` runs natively (gfx950, Blackwell)."""
    return problem.dtype_b == MXFP4 and not mx_native(target)


MOE = MoeOp()


def _positive(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"`{name}` must be a positive integer, got {value!r}")
    return value
