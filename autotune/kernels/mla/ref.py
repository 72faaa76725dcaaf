"""MLA decode in PyTorch: the reference (fp32, one sequence at a time) and the gathered baseline.

Both read the cache through the page table: token t of sequence b is row t % page_size of page
page_table[b, t // page_size]. A token's key is its whole row (latent and RoPE dims), its value the
latent dims; an FP8 cache is dequantized by its per-tensor scale. A sequence of context 0 has a zero
output.
"""

from __future__ import annotations

import torch

__all__ = ["gathered_attention", "mla_reference", "paged_inputs"]


def mla_reference(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    sm_scale: float,
    latent: int,
    kv_scale: float | None = None,
) -> torch.Tensor:
    """softmax(q·kᵀ·sm_scale)·v per sequence and head, in fp32: (B, H, latent)."""
    B, H, _ = q.shape
    page = kv_cache.shape[1]
    out = torch.zeros(B, H, latent, dtype=torch.float32, device=q.device)
    lens = context_lens.tolist()
    for b in range(B):
        ctx = int(lens[b])
        if ctx == 0:
            continue
        pages = page_table[b, : -(-ctx // page)].long()
        rows = kv_cache[pages].reshape(-1, kv_cache.shape[-1])[:ctx].float()
        if kv_scale is not None:
            rows = rows * kv_scale
        scores = (q[b].float() @ rows.t()) * sm_scale
        out[b] = torch.softmax(scores, dim=-1) @ rows[:, :latent]
    return out


def gathered_attention(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    page_table: torch.Tensor,
    context_lens: torch.Tensor,
    out: torch.Tensor,
    sm_scale: float,
    kv_scale: float | None = None,
) -> None:
    """The baseline: every page of the page table gathered into one (B, pages·page_size, K) tensor in
    q's dtype, two batched matmuls and a masked fp32 softmax, written into `out`. No host sync and no
    data-dependent size, but it holds a copy of the whole context of every sequence."""
    B, max_pages = page_table.shape
    num_pages, page, K = kv_cache.shape
    latent = out.shape[-1]
    index = page_table.long().clamp(0, num_pages - 1)  # entries past a sequence's pages are masked
    rows = kv_cache[index].reshape(B, max_pages * page, K)
    rows = rows.to(q.dtype)
    scores = torch.bmm(q, rows.transpose(1, 2)).float() * (sm_scale * (kv_scale or 1.0))
    positions = torch.arange(max_pages * page, device=q.device)
    scores.masked_fill_(positions[None, None, :] >= context_lens.long()[:, None, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num_(0.0)  # context 0: all -inf
    result = torch.bmm(probs.to(q.dtype), rows[..., :latent]).float()
    out.copy_(result * (kv_scale or 1.0))


def paged_inputs(
    heads: int,
    latent: int,
    rope: int,
    page_size: int,
    context_lens: list[int],
    *,
    kv_dtype: torch.dtype,
    device: str | torch.device,
    seed: int,
    spare_pages: int = 1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float | None]:
    """Random queries (bf16) and a random paged cache holding `context_lens` tokens per sequence: (q,
    kv_cache, page_table, context_lens, kv_scale). The pages are handed out in a random order, with
    `spare_pages` unused ones; the page table is as wide as the longest sequence needs, its entries past
    a sequence's pages point at page 0. An FP8 cache (`kv_dtype` float8) holds values of about unit size
    quantized with one scale (drawn where they are used: a long context is gigabytes)."""
    batch, K = len(context_lens), latent + rope
    need = [-(-n // page_size) for n in context_lens]
    width = max(1, *need)
    num_pages = sum(need) + spare_pages
    order = torch.randperm(num_pages, generator=torch.Generator().manual_seed(seed))
    table = torch.zeros(batch, width, dtype=torch.int32)
    used = 0
    for b, n in enumerate(need):
        table[b, :n] = order[used : used + n].int()
        used += n
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randn(batch, heads, K, generator=gen, device=device, dtype=torch.bfloat16)
    cache = torch.randn(num_pages, page_size, K, generator=gen, device=device, dtype=torch.bfloat16)
    kv_scale = None
    if kv_dtype != torch.bfloat16:
        fp8_max = float(torch.finfo(kv_dtype).max)
        kv_scale = _FP8_RANGE / fp8_max
        cache = (cache / kv_scale).clamp_(-fp8_max, fp8_max).to(kv_dtype)
    lens = torch.tensor(context_lens, dtype=torch.int32, device=device)
    return q, cache, table.to(device), lens, kv_scale


#: The magnitude an FP8 cache's largest value stands for (random normal values stay within it).
_FP8_RANGE = 6.0
