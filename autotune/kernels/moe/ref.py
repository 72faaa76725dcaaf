"""The fused MoE MLP in plain PyTorch: routing, token alignment, FP8 block and MXFP4 quantization of the
weights, and the reference.

Shapes: x (M, K) activations; w1 (E, 2N, K), rows [0, N) the gate projection and rows [N, 2N) the up
projection; w2 (E, K, N) the down projection; topk_weights (M, topk) and topk_ids (M, topk) from `route`.
MXFP4 weights (OCP MX: e2m1 packed two per byte along K, the earlier element in the low nibble, e8m0
scales per 32 elements of K, `common.formats`) are w1 (E, 2N, K/2) and w2 (E, K, N/2) uint8 with scales
w1_scale (E, 2N, K/32) and w2_scale (E, K, N/32) uint8; K and N multiples of 32.
Torch only (no triton): `moe.kernel` uses `align_block_size`, the quantizers and `validate_moe_inputs`, and
the tests compare its output with `moe_reference`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from autotune.core.problem import cdiv
from autotune.kernels.common.formats import MX_BLOCK, dequantize_mx, quantize_mx

__all__ = [
    "FP8_BLOCK",
    "FP8_DTYPES",
    "align_block_size",
    "dequantize_blockwise",
    "dequantize_mxfp4_weight",
    "moe_reference",
    "quantize_fp8_act_groupwise",
    "quantize_fp8_weight_blockwise",
    "quantize_mxfp4_weight",
    "route",
    "routing_logits",
    "validate_moe_call",
    "validate_moe_inputs",
    "validate_mxfp4_moe_inputs",
]

#: The only weight block shape supported with FP8 weights (DeepSeek-V3 style [128, 128] blocks).
FP8_BLOCK = (128, 128)
#: FP8 weight dtypes: OCP e4m3 (NVIDIA, MI355X) and e4m3fnuz (MI300X).
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)
_ACT_DTYPES = (torch.bfloat16, torch.float16)


# -- routing ------------------------------------------------------------------------------------------


def route(logits: Tensor, topk: int, renormalize: bool = True) -> tuple[Tensor, Tensor]:
    """Softmax over the experts in fp32, then the top-k experts of every token.

    Returns weights (M, topk) fp32, summing to 1 per token when `renormalize`, and ids (M, topk) int32.
    """
    if logits.dim() != 2:
        raise ValueError(f"router logits must be (M, E), got shape {tuple(logits.shape)}")
    if not 1 <= topk <= logits.shape[1]:
        raise ValueError(f"topk must be in [1, E={logits.shape[1]}], got {topk}")
    probs = torch.softmax(logits.float(), dim=-1)
    weights, ids = torch.topk(probs, topk, dim=-1)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids.to(torch.int32)


def routing_logits(
    M: int,
    E: int,
    *,
    zipf: float = 0.0,
    generator: torch.Generator | None = None,
    device: str | torch.device = "cpu",
) -> Tensor:
    """Random router logits (M, E) fp32 with a chosen load balance.

    Gumbel noise plus a per-expert bias log(1/r^zipf), r the expert's rank in a random permutation: by the
    Gumbel-max trick a token's top-1 expert has rank r with probability ∝ 1/r^zipf. zipf=0 gives a uniform
    expected load; zipf=1.2 a few hot experts. The permutation keeps the hot experts off ids 0, 1, ...
    """
    if M < 0 or E < 1:
        raise ValueError(f"need M >= 0 and E >= 1, got M={M}, E={E}")
    if zipf < 0 or not math.isfinite(zipf):
        raise ValueError(f"zipf must be a finite number >= 0, got {zipf}")
    u = torch.rand(M, E, generator=generator, dtype=torch.float32)
    gumbel = -torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))
    if zipf > 0:
        ranks = torch.randperm(E, generator=generator) + 1  # expert j has rank ranks[j]
        gumbel = gumbel - zipf * torch.log(ranks.float())[None, :]
    return gumbel.to(device)


def align_block_size(topk_ids: Tensor, block_m: int, num_experts: int) -> tuple[Tensor, Tensor, int]:
    """Sorts the M·topk (token, slot) pairs by expert and pads each expert's group to a multiple of block_m.

    Pair i is flat index i = token·topk + slot into topk_ids. Returns sorted_ids (int32, num_padded long;
    padding holds the sentinel M·topk), expert_ids (int32, one per block of block_m: that block's expert)
    and num_padded. Experts with no tokens get no blocks. Deterministic: a stable sort keeps each expert's
    pairs in token order.
    """
    if topk_ids.dim() != 2:
        raise ValueError(f"topk_ids must be (M, topk), got shape {tuple(topk_ids.shape)}")
    if block_m < 1:
        raise ValueError(f"block_m must be >= 1, got {block_m}")
    flat = topk_ids.reshape(-1).long()
    n = flat.numel()
    if n and (int(flat.min()) < 0 or int(flat.max()) >= num_experts):
        raise ValueError(
            f"topk_ids out of range [0, {num_experts}): min {int(flat.min())}, max {int(flat.max())}"
        )
    device = topk_ids.device
    counts = torch.bincount(flat, minlength=num_experts)
    padded = (counts + block_m - 1) // block_m * block_m
    num_padded = int(padded.sum())
    order = torch.sort(flat, stable=True).indices
    sorted_experts = flat[order]
    count_start = torch.cumsum(counts, 0) - counts
    padded_start = torch.cumsum(padded, 0) - padded
    rank = torch.arange(n, device=device) - count_start[sorted_experts]
    sorted_ids = torch.full((num_padded,), n, dtype=torch.int32, device=device)
    sorted_ids[padded_start[sorted_experts] + rank] = order.to(torch.int32)
    expert_ids = torch.repeat_interleave(
        torch.arange(num_experts, dtype=torch.int32, device=device), padded // block_m
    )
    return sorted_ids, expert_ids, num_padded


# -- FP8 block quantization ---------------------------------------------------------------------------


def _quantize_blocks(w: Tensor, block: tuple[int, int], fp8_dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """w (..., R, C) → fp8 of the same shape and fp32 scales (..., cdiv(R, br), cdiv(C, bc))."""
    if fp8_dtype not in FP8_DTYPES:
        raise ValueError(f"fp8_dtype must be one of {FP8_DTYPES}, got {fp8_dtype}")
    br, bc = block
    if br < 1 or bc < 1:
        raise ValueError(f"block sizes must be >= 1, got {block}")
    *lead, R, C = w.shape
    nr, nc = cdiv(R, br), cdiv(C, bc)
    if w.is_meta:  # shapes only (a compile-only recording): the contiguous layouts computed below
        meta = torch.empty(w.shape, dtype=fp8_dtype, device="meta")
        return meta, torch.empty((*lead, nr, nc), dtype=torch.float32, device="meta")
    wf = w.float()
    wp = torch.nn.functional.pad(wf, (0, nc * bc - C, 0, nr * br - R))  # zeros do not change the amax
    blocks = wp.reshape(*lead, nr, br, nc, bc)
    amax = blocks.abs().amax(dim=(-3, -1))
    fp8_max = torch.finfo(fp8_dtype).max
    scale = torch.where(amax > 0, amax / fp8_max, torch.ones_like(amax))
    q = (blocks / scale[..., :, None, :, None]).clamp(-fp8_max, fp8_max).to(fp8_dtype)
    q = q.reshape(*lead, nr * br, nc * bc)[..., :R, :C].contiguous()
    return q, scale.contiguous()


def quantize_fp8_weight_blockwise(
    w: Tensor, block: Sequence[int] = FP8_BLOCK, fp8_dtype: torch.dtype = torch.float8_e4m3fn
) -> tuple[Tensor, Tensor]:
    """w (E, R, C) → (w_q fp8 (E, R, C), scale fp32 (E, cdiv(R, br), cdiv(C, bc))), scale = amax / fp8 max
    per block (1 for an all-zero block), so w ≈ w_q · scale block by block."""
    if w.dim() != 3:
        raise ValueError(f"expert weights must be (E, R, C), got shape {tuple(w.shape)}")
    if len(block) != 2:
        raise ValueError(f"block must be (rows, cols), got {block}")
    return _quantize_blocks(w, (int(block[0]), int(block[1])), fp8_dtype)


def quantize_fp8_act_groupwise(
    x: Tensor, group: int = 128, fp8_dtype: torch.dtype = torch.float8_e4m3fn
) -> tuple[Tensor, Tensor]:
    """x (M, K) → (x_q fp8 (M, K), scale fp32 (M, cdiv(K, group))): one scale per row and group of K."""
    if x.dim() != 2:
        raise ValueError(f"activations must be (M, K), got shape {tuple(x.shape)}")
    return _quantize_blocks(x, (1, group), fp8_dtype)


def dequantize_blockwise(q: Tensor, scale: Tensor, block: Sequence[int]) -> Tensor:
    """q (..., R, C) times its block scales (..., cdiv(R, br), cdiv(C, bc)), in fp32."""
    br, bc = int(block[0]), int(block[1])
    *lead, R, C = q.shape
    want = (*lead, cdiv(R, br), cdiv(C, bc))
    if tuple(scale.shape) != want:
        raise ValueError(f"scale shape {tuple(scale.shape)} does not fit q {tuple(q.shape)} with block "
                         f"{(br, bc)}: expected {want}")  # fmt: skip
    s = scale.float().repeat_interleave(br, dim=-2).repeat_interleave(bc, dim=-1)[..., :R, :C]
    return q.float() * s


# -- MXFP4 weights --------------------------------------------------------------------------------------


def quantize_mxfp4_weight(w: Tensor) -> tuple[Tensor, Tensor]:
    """w (E, R, C), C a multiple of 32 → (packed e2m1 (E, R, C/2) uint8, e8m0 scales (E, R, C/32) uint8),
    row by row as `quant.quantize_mx` quantizes: the scale of each 32-group is 2^(exponent of its amax − 2),
    values rounded to the nearest e2m1 (ties to even), saturated at ±6."""
    if w.dim() != 3 or w.shape[2] % MX_BLOCK:
        raise ValueError(f"expert weights must be (E, R, C) with C a multiple of {MX_BLOCK}, got "
                         f"{tuple(w.shape)}")  # fmt: skip
    E, R, C = w.shape
    if w.is_meta:  # shapes only (a compile-only recording)
        return (torch.empty(E, R, C // 2, dtype=torch.uint8, device="meta"),
                torch.empty(E, R, C // MX_BLOCK, dtype=torch.uint8, device="meta"))  # fmt: skip
    q, s = quantize_mx(w.reshape(E * R, C), "e2m1")
    return q.view(E, R, C // 2), s.view(E, R, C // MX_BLOCK)


def dequantize_mxfp4_weight(q: Tensor, scale: Tensor) -> Tensor:
    """Packed e2m1 (E, R, C/2) with e8m0 scales (E, R, C/32) → fp32 (E, R, C): exactly the values the
    kernel multiplies (each e2m1 value times its power of two, exact in bf16 and fp32)."""
    E, R, half = q.shape
    if tuple(scale.shape) != (E, R, 2 * half // MX_BLOCK):
        raise ValueError(f"scale shape {tuple(scale.shape)} does not fit packed weights {tuple(q.shape)}: "
                         f"expected {(E, R, 2 * half // MX_BLOCK)}")  # fmt: skip
    out = dequantize_mx(q.reshape(E * R, half), scale.reshape(E * R, -1), "e2m1")
    return out.view(E, R, 2 * half)


# -- validation ---------------------------------------------------------------------------------------


def _validate_routing(
    M: int,
    E: int,
    topk_weights: Tensor,
    topk_ids: Tensor,
    tensors: Sequence[Tensor | None],
    check_ids: bool,
) -> None:
    """The routing's shapes and dtypes, one device for all `tensors`, and (`check_ids`, not on the meta
    device) expert ids in [0, E)."""
    if topk_ids.dim() != 2 or topk_ids.shape[0] != M:
        raise ValueError(f"topk_ids must be (M={M}, topk), got shape {tuple(topk_ids.shape)}")
    if topk_ids.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"topk_ids must be int32 or int64, got {topk_ids.dtype}")
    if topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_weights shape {tuple(topk_weights.shape)} != topk_ids shape {tuple(topk_ids.shape)}"
        )
    if not topk_weights.dtype.is_floating_point:
        raise ValueError(f"topk_weights must be floating point, got {topk_weights.dtype}")
    if not 1 <= topk_ids.shape[1] <= E:
        raise ValueError(f"topk must be in [1, E={E}], got {topk_ids.shape[1]}")
    devices = {t.device for t in tensors if t is not None}
    if len(devices) > 1:
        raise ValueError(f"all tensors must be on one device, got {sorted(str(d) for d in devices)}")
    if (
        check_ids
        and topk_ids.numel()
        and not topk_ids.is_meta
        and (int(topk_ids.min()) < 0 or int(topk_ids.max()) >= E)
    ):
        raise ValueError(
            f"topk_ids out of range [0, {E}): min {int(topk_ids.min())}, max {int(topk_ids.max())}"
        )


def validate_moe_inputs(
    x: Tensor,
    w1: Tensor,
    w2: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    *,
    w1_scale: Tensor | None = None,
    w2_scale: Tensor | None = None,
    block_shape: Sequence[int] | None = None,
    act_dtypes: tuple[torch.dtype, ...] = _ACT_DTYPES,
    check_ids: bool = True,
) -> bool:
    """Checks shapes, dtypes and expert ids; one ValueError naming the problem. True for FP8 weights.

    The range check of topk_ids reads them (a device sync); `check_ids=False` skips it (the caller has
    checked them, e.g. through align_block_size). Tensors on the meta device are never read.
    """
    if x.dim() != 2:
        raise ValueError(f"x must be (M, K), got shape {tuple(x.shape)}")
    if x.dtype not in act_dtypes:
        raise ValueError(f"x must be one of {act_dtypes}, got {x.dtype}")
    M, K = x.shape
    if w1.dim() != 3 or w1.shape[1] % 2 or w1.shape[2] != K:
        raise ValueError(f"w1 must be (E, 2N, K={K}), got shape {tuple(w1.shape)}")
    E, N = w1.shape[0], w1.shape[1] // 2
    if tuple(w2.shape) != (E, K, N):
        raise ValueError(
            f"w2 must be (E={E}, K={K}, N={N}) to match w1 {tuple(w1.shape)}, got {tuple(w2.shape)}"
        )
    _validate_routing(M, E, topk_weights, topk_ids, (x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale),
                      check_ids)  # fmt: skip

    fp8 = w1.dtype in FP8_DTYPES
    if not fp8:
        if w1.dtype != x.dtype or w2.dtype != x.dtype:
            raise ValueError(
                f"w1 and w2 must have x's dtype {x.dtype} (or be FP8), got {w1.dtype}, {w2.dtype}"
            )
        if w1_scale is not None or w2_scale is not None or block_shape is not None:
            raise ValueError("w1_scale, w2_scale and block_shape apply to FP8 weights only")
        return False
    if w2.dtype != w1.dtype:
        raise ValueError(f"w1 and w2 must share one FP8 dtype, got {w1.dtype} and {w2.dtype}")
    if block_shape is None or tuple(int(b) for b in block_shape) != FP8_BLOCK:
        raise ValueError(f"FP8 weights need block_shape={list(FP8_BLOCK)}, got {block_shape}")
    br, bc = FP8_BLOCK
    for name, scale, w in (("w1_scale", w1_scale, w1), ("w2_scale", w2_scale, w2)):
        if scale is None:
            raise ValueError(f"FP8 weights need {name}")
        want = (E, cdiv(w.shape[1], br), cdiv(w.shape[2], bc))
        if tuple(scale.shape) != want:
            raise ValueError(
                f"{name} must have shape {want} for blocks {list(FP8_BLOCK)}, got {tuple(scale.shape)}"
            )
        if scale.dtype != torch.float32:
            raise ValueError(f"{name} must be float32, got {scale.dtype}")
    return True


def validate_mxfp4_moe_inputs(
    x: Tensor,
    w1: Tensor,
    w2: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    *,
    w1_scale: Tensor | None,
    w2_scale: Tensor | None,
    act_dtypes: tuple[torch.dtype, ...] = (torch.bfloat16,),
    check_ids: bool = True,
) -> None:
    """Checks MXFP4 weights (module docstring: packed uint8 w1 (E, 2N, K/2), w2 (E, K, N/2), e8m0 uint8
    scales per 32 along K) with bf16 activations, and the routing as `validate_moe_inputs` does; one
    ValueError naming the problem."""
    if x.dim() != 2:
        raise ValueError(f"x must be (M, K), got shape {tuple(x.shape)}")
    if x.dtype not in act_dtypes:
        raise ValueError(f"with MXFP4 weights x must be one of {act_dtypes}, got {x.dtype}")
    M, K = x.shape
    if K % MX_BLOCK:
        raise ValueError(f"MXFP4 weights need K (x's columns) a multiple of {MX_BLOCK}, got {K}")
    if w1.dtype != torch.uint8 or w2.dtype != torch.uint8:
        raise ValueError(f"MXFP4 weights are packed uint8 (two e2m1 a byte), got {w1.dtype} and {w2.dtype}")
    if w1.dim() != 3 or w1.shape[1] % 2 or w1.shape[2] != K // 2:
        raise ValueError(f"MXFP4 w1 must be (E, 2N, K/2={K // 2}) uint8, got shape {tuple(w1.shape)}")
    E, N = w1.shape[0], w1.shape[1] // 2
    if N % MX_BLOCK:
        raise ValueError(f"MXFP4 weights need N a multiple of {MX_BLOCK}, got N={N}")
    if tuple(w2.shape) != (E, K, N // 2):
        raise ValueError(f"MXFP4 w2 must be (E={E}, K={K}, N/2={N // 2}) uint8 to match w1 "
                         f"{tuple(w1.shape)}, got {tuple(w2.shape)}")  # fmt: skip
    for name, scale, w in (("w1_scale", w1_scale, w1), ("w2_scale", w2_scale, w2)):
        want = (E, w.shape[1], 2 * w.shape[2] // MX_BLOCK)
        if scale is None:
            raise ValueError(f"MXFP4 weights need {name}: e8m0 uint8 of shape {want}")
        if scale.dtype != torch.uint8 or tuple(scale.shape) != want:
            raise ValueError(f"{name} must be e8m0 uint8 of shape {want} (one per {MX_BLOCK} along K), got "
                             f"{scale.dtype} {tuple(scale.shape)}")  # fmt: skip
    _validate_routing(M, E, topk_weights, topk_ids, (x, w1, w2, topk_weights, topk_ids, w1_scale, w2_scale),
                      check_ids)  # fmt: skip


# -- reference ----------------------------------------------------------------------------------------


def validate_moe_call(
    x: Tensor,
    w1: Tensor,
    w2: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    *,
    w1_scale: Tensor | None,
    w2_scale: Tensor | None,
    block_shape: Sequence[int] | None,
    check_ids: bool = True,
    fp32_activations: bool = False,
) -> str:
    """Checks the inputs of any weights' MoE call (`validate_mxfp4_moe_inputs` for packed uint8 weights,
    else `validate_moe_inputs`; fp32 activations too where `fp32_activations`); one ValueError naming the
    problem. The weights' kind: "mxfp4", "fp8" or ""."""
    if w1.dtype == torch.uint8:
        if block_shape is not None:
            raise ValueError(
                "block_shape applies to FP8 weights only, not MXFP4 (e8m0 scales per 32 along K)"
            )
        acts = (torch.bfloat16, torch.float32) if fp32_activations else (torch.bfloat16,)
        validate_mxfp4_moe_inputs(x, w1, w2, topk_weights, topk_ids, w1_scale=w1_scale, w2_scale=w2_scale,
                                  act_dtypes=acts, check_ids=check_ids)  # fmt: skip
        return "mxfp4"
    fp8 = validate_moe_inputs(
        x, w1, w2, topk_weights, topk_ids, w1_scale=w1_scale, w2_scale=w2_scale, block_shape=block_shape,
        act_dtypes=(*_ACT_DTYPES, torch.float32) if fp32_activations else _ACT_DTYPES, check_ids=check_ids,
    )  # fmt: skip
    return "fp8" if fp8 else ""


def moe_reference(
    x: Tensor,
    w1: Tensor,
    w2: Tensor,
    topk_weights: Tensor,
    topk_ids: Tensor,
    *,
    w1_scale: Tensor | None = None,
    w2_scale: Tensor | None = None,
    block_shape: Sequence[int] | None = None,
    fused_gate_up: bool = False,
) -> Tensor:
    """The MoE MLP in fp32, expert by expert: out[t] = Σ_j weight[t, j] · (silu(g) · u) @ w2[e]ᵀ with
    [g | u] = x[t] @ w1[e]ᵀ and e = topk_ids[t, j]. Returns (M, K) fp32.

    With FP8 weights it computes on exactly the values the kernel reads: x quantized per 1×128 group, the
    silu(g)·u intermediate rounded to x's dtype and quantized per 1×128 group, weights dequantized with
    their block scales. With MXFP4 weights (uint8, module docstring) the weights are dequantized exactly
    (`dequantize_mxfp4_weight`: what the kernel multiplies) and the rest is the bf16 math. Unless
    `fused_gate_up` (the kernel's GATE_UP_FUSED structure, whose epilogue
    reads g and u in fp32), g and u are rounded to x's dtype first, as vLLM's structure stores them.
    """
    kind = validate_moe_call(x, w1, w2, topk_weights, topk_ids, w1_scale=w1_scale, w2_scale=w2_scale,
                             block_shape=block_shape, fp32_activations=True)  # fmt: skip
    mxfp4, fp8 = kind == "mxfp4", kind == "fp8"
    M, K = x.shape
    E, N = w1.shape[0], w1.shape[1] // 2
    if mxfp4:
        assert w1_scale is not None and w2_scale is not None
        xf, w1f, w2f = x.float(), dequantize_mxfp4_weight(w1, w1_scale), dequantize_mxfp4_weight(w2, w2_scale)
    elif fp8:
        assert w1_scale is not None and w2_scale is not None
        group = FP8_BLOCK[1]
        xq, xs = quantize_fp8_act_groupwise(x, group, w1.dtype)
        xf = dequantize_blockwise(xq, xs, (1, group))
        w1f = dequantize_blockwise(w1, w1_scale, FP8_BLOCK)
        w2f = dequantize_blockwise(w2, w2_scale, FP8_BLOCK)
    else:
        xf, w1f, w2f = x.float(), w1.float(), w2.float()
    out = torch.zeros(M, K, dtype=torch.float32, device=x.device)
    ids = topk_ids.long()
    weights = topk_weights.float()
    for e in range(E):
        tokens, slots = torch.nonzero(ids == e, as_tuple=True)
        if tokens.numel() == 0:
            continue
        h = xf[tokens] @ w1f[e].T
        if not fused_gate_up and x.dtype != torch.float32:
            h = h.to(x.dtype).float()
        inter = torch.nn.functional.silu(h[:, :N]) * h[:, N:]
        if fp8:
            iq, is_ = quantize_fp8_act_groupwise(inter.to(x.dtype), FP8_BLOCK[1], w1.dtype)
            inter = dequantize_blockwise(iq, is_, (1, FP8_BLOCK[1]))
        y = (inter @ w2f[e].T) * weights[tokens, slots][:, None]
        out.index_add_(0, tokens, y)
    return out
