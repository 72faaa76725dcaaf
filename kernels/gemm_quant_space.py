"""Search spaces and heuristic defaults of the quantized GEMMs (FP8 row-wise/blockwise, MXFP8, MXFP4).

The Triton knobs are the dense GEMM's (tiles, GROUP_M, SPLIT_K, num_warps, num_stages and on AMD
matrix_instr_nonkdim, waves_per_eu, NUM_XCDS, kpack on gfx942) with K tiles for one-byte and half-byte
elements: decode shapes (M up to 64) are memory-bound, so narrow BLOCK_M, K tiles up to 512 and split-K
up to 16 are all in the space; prefill gets the full tile range. Vendor backends ("torch":
torch._scaled_mm, "aiter" on ROCm) are a single config each, present only where they can run the problem;
elsewhere their config is pruned with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from autotune.config import Config, Value
from autotune.kernels.gemm_space import _constraints as _dense_constraints
from autotune.kernels.gemm_space import _pick_split_k, fit_to_space, knob_values
from autotune.problem import QUANT_OPS, Problem, cdiv, next_pow2
from autotune.space import Constraint, SearchSpace, SubSpace
from autotune.target import Target

__all__ = [
    "VendorCheck",
    "mx_native",
    "quant_backends",
    "quant_default_config",
    "quant_space",
    "quant_triton_params",
]

#: Why a vendor backend cannot run a problem on a target ("" when it can).
VendorCheck = Callable[[str, Problem, Target], str]

_MIN_TILE = 16


def mx_native(target: Target) -> bool:
    """Whether `target` has MX matrix instructions (tl.dot_scaled runs natively): gfx950 and Blackwell.
    Elsewhere (gfx942, Hopper, the interpreter) MX tiles are dequantized to bf16 in the kernel."""
    if target.arch == "gfx950":
        return True
    if target.is_nvidia and target.arch.startswith("sm_"):
        return int(target.arch[3:].rstrip("a")) >= 100
    return False


def _k_tiles(op: str, target: Target) -> tuple[int, ...]:
    if op.startswith("gemm_fp8"):
        return (64, 128, 256, 512)
    if mx_native(target):
        return (128, 256, 512)  # a 16x16x128 scaled MFMA needs 128 K per tile
    return (64, 128, 256)  # emulated: every K element is dequantized in registers


def quant_triton_params(op: str, target: Target) -> dict[str, Sequence[Value]]:
    """The Triton knobs of quantized op `op` and their values on `target` (FUSED_SPLIT and STREAM_K: the
    FP8 ops only)."""
    return knob_values(
        target,
        k_tiles=_k_tiles(op, target),
        nvidia_stages=(2, 3, 4),
        interpreter_k_tiles=(32, 64),
        in_launch=op.startswith("gemm_fp8"),
    )


def _constraints(problem: Problem, target: Target) -> list[Constraint]:
    out = list(_dense_constraints(problem, target))
    if problem.op == "gemm_mxfp4_bf16a" and not target.interpreter:
        out.append(
            Constraint(
                "quantize_registers",
                "quantizing a {BLOCK_M}x{BLOCK_K} bf16 tile in registers over {num_warps} warps needs "
                "more than 64 values a lane",
                lambda c: (
                    int(c["BLOCK_M"]) * int(c["BLOCK_K"]) <= 64 * int(c["num_warps"]) * target.wave_size
                ),
            )
        )
    return out


def quant_default_config(problem: Problem, target: Target) -> Config:
    """The heuristic Triton config of a quantized GEMM; always a member of its space.

    Decode (M <= 64): the narrowest M tile that covers M, a wide K tile and split-K while the tile grid
    underfills the GPU; prefill: large tiles, as the dense GEMM.
    """
    params = quant_triton_params(problem.op, target)
    ks = [int(v) for v in params["BLOCK_K"]]
    M, N = problem.M, problem.N
    if target.interpreter:
        bm, bn, bk, warps, stages = 16, 32, 32, 4, 1
    elif M <= 64:
        bm, bn, bk = max(_MIN_TILE, next_pow2(M)), 64, ks[-2] if len(ks) > 1 else ks[-1]
        warps, stages = 4, 2 if target.is_amd else 3
    elif target.is_amd:
        bm, bn, bk, warps, stages = 256, 256, ks[1], 8, 2
    elif problem.op == "gemm_fp8_blockwise":
        # each K group's product is scaled before it is added: with 4 warps the H100 ran 128x128 tiles
        # 2.2x slower than with 8 (468 against 213 µs on DeepSeek-V3 gate/up at M = 2048, two runs of a day)
        bm, bn, bk, warps, stages = 128, 128, ks[1], 8, 4
    else:
        bm, bn, bk, warps, stages = 128, 128, ks[1], 4, 3
    bm = min(bm, max(_MIN_TILE, next_pow2(M)))
    bn = min(bn, max(32 if not target.interpreter else 16, next_pow2(N)))
    bk = max(ks[0], min(bk, next_pow2(problem.K)))
    values: dict[str, Value] = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, num_warps=warps, num_stages=stages)
    values["GROUP_M"] = 8 if cdiv(M, bm) > 1 and 8 in params["GROUP_M"] else 1
    values["SPLIT_K"] = _pick_split_k(problem, target, bm, bn, bk, params["SPLIT_K"])
    if "STREAM_K" in params:
        values["FUSED_SPLIT"] = 1 if int(values["SPLIT_K"]) > 1 else 0  # one launch: 1-4% faster (H100)
        values["STREAM_K"] = 0
    if target.is_amd:
        values["matrix_instr_nonkdim"] = 16
        values["waves_per_eu"] = 0
        tiles = cdiv(M, bm) * cdiv(N, bn)
        values["NUM_XCDS"] = target.xcds if tiles >= 2 * target.xcds else 1
        if "kpack" in params:
            values["kpack"] = 2 if problem.op.startswith("gemm_fp8") else 1
    sub = SubSpace("triton", params, _constraints(problem, target))
    return fit_to_space(
        Config(values, backend="triton"), sub, ("num_stages", "BLOCK_K", "BLOCK_N", "BLOCK_M", "num_warps")
    )


def quant_backends(target: Target) -> tuple[str, ...]:
    """The backends a quantized GEMM knows on `target`: torch._scaled_mm, our kernel, aiter on AMD."""
    return ("torch", "triton", "aiter") if target.is_amd else ("torch", "triton")


def _absent(backend: str, reason: str) -> SubSpace:
    """A vendor backend that cannot run the problem: its one config, pruned with the reason."""
    return SubSpace(backend, constraints=(Constraint(f"{backend}_unsupported", reason, lambda c: False),))


@lru_cache(maxsize=256)
def _cached_space(
    problem: Problem, target: Target, backends: tuple[str, ...], vendor: tuple[tuple[str, str], ...]
) -> SearchSpace:
    available = quant_backends(target)
    reasons = dict(vendor)
    default = quant_default_config(problem, target)
    subs = []
    for backend in backends:
        if backend not in available:
            raise ValueError(
                f"unknown {problem.op} backend {backend!r} on {target.arch}; known: {', '.join(available)}"
            )
        if backend == "triton":
            params = quant_triton_params(problem.op, target)
            subs.append(SubSpace("triton", params, _constraints(problem, target), first=(default,)))
        elif reasons.get(backend):
            subs.append(_absent(backend, reasons[backend]))
        else:
            subs.append(SubSpace(backend))
    return SearchSpace(subs)


def quant_space(
    problem: Problem, target: Target, backends: Sequence[str] | None, vendor_check: VendorCheck
) -> SearchSpace:
    """Vendor backends first (each one config, or pruned with the reason `vendor_check` gives), then the
    Triton kernel with its heuristic default first. Cached per (problem, target, backends, reasons)."""
    if problem.op not in QUANT_OPS:
        raise ValueError(f"not a quantized GEMM: {problem.op}")
    chosen = tuple(quant_backends(target) if backends is None else backends)
    order = {"torch": 0, "aiter": 1, "triton": 2}
    chosen = tuple(sorted(chosen, key=lambda b: order.get(b, 3)))
    vendor = tuple((b, vendor_check(b, problem, target)) for b in chosen if b in ("torch", "aiter"))
    return _cached_space(problem, target, chosen, vendor)
