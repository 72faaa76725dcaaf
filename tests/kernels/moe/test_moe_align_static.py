"""The routing alignment's two launches (`moe.align`) cross-compiled for sm_90, gfx942 and gfx950, no GPU:
they compile at the expert counts of shipped models, and spill nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

ARCHS = ("sm_90", "gfx942", "gfx950")

SCRIPT = """
import torch
from autotune.core.op import KernelCall
from autotune.engine.compile import amd_features, compile_call, nvidia_features
from autotune.kernels.moe.align import CHUNK, count_kernel, place_kernel, spans_for

out = {}
for experts, block_m in json.loads(sys.argv[2]):
    n = 4096 * 8
    spans = spans_for(n, experts)
    ids = torch.empty(n, dtype=torch.int32, device="meta")
    ints = torch.empty(experts * spans, dtype=torch.int32, device="meta")
    slots = torch.empty(65536, dtype=torch.int32, device="meta")
    span = -(-n // spans)
    calls = {
        "count": KernelCall(
            count_kernel, (experts, spans), (ids, ints, n, span), dict(CHUNK=CHUNK, num_warps=4)
        ),
        "place": KernelCall(
            place_kernel, (experts, spans), (ids, ints, slots, slots, n, 65536, experts, span),
            dict(BLOCK_M=block_m, E_P2=1 << (experts - 1).bit_length(),
                 S_P2=1 << (spans - 1).bit_length(), CHUNK=CHUNK, num_warps=4),
        ),
    }
    for name, call in calls.items():
        kernel = compile_call(call, target)
        if target.is_amd:
            features = amd_features(kernel.asm["amdgcn"], kernel.metadata.shared, target, 4)
        else:
            features = nvidia_features(kernel, target, 4)
        out[f"{name} E={experts} BM={block_m} spans={spans}"] = features.spills
print(json.dumps(out))
"""


@pytest.mark.parametrize("arch", ARCHS)
def test_the_alignment_compiles_without_spills(
    compile_on_arch: Callable[..., dict[str, Any]], arch: str
) -> None:
    cases = [[8, 16], [60, 64], [256, 128], [512, 16], [1024, 64]]
    result = compile_on_arch(SCRIPT, arch, cases)
    assert len(result) == 2 * len(cases) and all(spills == 0 for spills in result.values()), result
