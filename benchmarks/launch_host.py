"""Host time of a launch (GPU): Triton's own launch against the pinned launch, and the dispatched calls.

Per case, side by side in alternating batches (each batch n calls of one variant, timed on the host
clock with the GPU idle at its start, so that drifts of the host hit every variant alike):
- `triton`: the config's launcher with `AUTOTUNE_PINNED_LAUNCH=0`, so every launch binds its arguments
  in Triton's `JITFunction.run`;
- `pinned`: the same launcher as the library builds it (`autotune.kernels.launch`);
- `no lookup`: `autotune.kernels.launch_config(config, a, b)`, the dispatched call less its lookup;
- `no op`: the implementation of the op autotune::gemm called directly (`dense.api._gemm_impl`);
- `op`: the registered torch op, `torch.ops.autotune.gemm.default`: what a compiled model's graph calls;
- `dispatched`: the run-time entry point (`autotune.kernels.gemm`, `gemm_quant`) reading a table that
  holds the config, lookup, checks and output allocation included (called eagerly on plain tensors, it
  runs the implementation without the torch op's dispatch: `torch_ops.eager`);
- `torch.mm`: the vendor library's call on the same inputs, for scale.
The first case is the floor: an op that does nothing, registered and called as ours are; its op cost is
what torch's dispatcher takes from any op implemented in Python on this host.
For the quantized GEMM and the fused MoE, whose launches are built per call, the dispatched call (or
the op's launch) runs with the shortcut off and on. The problems are tiny, so the GPU keeps up and the
host is what is timed. The `overhead` column is dispatched less pinned; `op cost` is op less no op, what
the torch op's dispatch costs a call; `entry cost` dispatched less no op, what the entry point adds to its
implementation (the target for both: under 3 µs).

    python benchmarks/launch_host.py --out results/

Prints a short table last; details go to --out (JSON).
"""

from __future__ import annotations

import os
import statistics
import sys
from collections.abc import Callable
from typing import Any

import harness
import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.dispatch import Dispatcher, Table, install_dispatcher
from autotune.kernels import GEMM, MOE, QUANT_GEMMS, gemm, gemm_quant, launch_config
from autotune.kernels.dense.api import _gemm_impl
from autotune.kernels.dense.gemv import gemv_launcher
from autotune.kernels.dense.kernel import launcher
from autotune.kernels.dense.tma import tma_launcher
from autotune.kernels.launch import PINNED_LAUNCH_ENV as ENV

#: (problem, config, None) of every case: the table the dispatched calls read.
WINNERS: list[tuple[Problem, Config, None]] = []


class EnvSwitch:
    """Runs `fn` with the pinned shortcut off (`on=False`) or on, for launches built per call."""

    def __init__(self, fn: Callable[[], Any], on: bool) -> None:
        self.fn, self.value = fn, "1" if on else "0"

    def __call__(self) -> Any:
        old = os.environ.get(ENV)
        os.environ[ENV] = self.value
        try:
            return self.fn()
        finally:
            if old is None:
                del os.environ[ENV]
            else:
                os.environ[ENV] = old


def _plain(make: Callable[[], Callable[..., None]]) -> Callable[..., None]:
    os.environ[ENV] = "0"
    try:
        return make()
    finally:
        del os.environ[ENV]


def dense_case(target: Any, backend: str) -> tuple[str, dict[str, Callable[[], Any]]]:
    # the default config at these M: the pointer kernel at 16 rows, the GEMV kernel (NVIDIA) at 1
    M, N, K = {"triton": (16, 256, 256), "triton_gemv": (1, 256, 256)}.get(backend, (256, 256, 256))
    p = Problem.of("gemm", M, N, K, "bf16")
    if backend == "triton":
        config = GEMM.default_config(p, target)
        make: Callable[[], Callable[..., None]] = lambda: launcher(  # noqa: E731
            config, is_amd=target.is_amd, num_sms=target.cu_count
        )
    elif backend == "triton_gemv":
        config = GEMM.default_config(p, target)
        make = lambda: gemv_launcher(config)  # noqa: E731
    else:
        config = Config(backend="triton_tma", BLOCK_M=64, BLOCK_N=64, BLOCK_K=64, GROUP_M=8, SPLIT_K=1,
                        PERSISTENT=0, TAIL_SPLIT=0, num_warps=4, num_stages=3)  # fmt: skip
        make = lambda: tma_launcher(config, num_sms=target.cu_count)  # noqa: E731
    assert config.backend == backend, config
    WINNERS.append((p, config, None))
    a, b = GEMM.make_inputs(p, "cuda", seed=0)
    split_k = int(config.get("SPLIT_K", 1))
    workspace = (
        torch.empty(split_k * M * N, device="cuda") if split_k > 1 and not config.get("FUSED_SPLIT") else None
    )
    plain, fast = _plain(make), make()

    def direct(run: Callable[..., None]) -> Callable[[], None]:
        def call() -> None:
            out = torch.empty((M, N), device="cuda", dtype=torch.bfloat16)
            if backend != "triton_tma":
                run(a, b, out, b.stride(1), b.stride(0), M, N, K, workspace)
            else:
                run(a, b, out, False, M, N, K, workspace)

        return call

    variants = {
        "triton": direct(plain),
        "pinned": direct(fast),
        "no lookup": lambda: launch_config(config, a, b, target=target),
        "no op": lambda: _gemm_impl(a, b),
        "op": lambda: torch.ops.autotune.gemm.default(a, b, "nk"),
        "dispatched": lambda: gemm(a, b),
        "torch.mm": lambda: torch.mm(a, b.t()),
    }
    return f"gemm {backend} {M}x{N}x{K} ({config.short()})", variants


def quant_case(target: Any) -> tuple[str, dict[str, Callable[[], Any]]]:
    op = QUANT_GEMMS["gemm_fp8_rowwise"]
    p = Problem.quant("gemm_fp8_rowwise", 1, 256, 256)
    config = op.default_config(p, target)
    WINNERS.append((p, config, None))
    a, b, sa, sb = op.make_inputs(p, "cuda", seed=0)

    def call() -> Any:
        return gemm_quant("gemm_fp8_rowwise", a, b, sa, sb)

    return f"gemm_fp8_rowwise 1x256x256 ({config.short()})", {
        "triton": EnvSwitch(call, on=False),
        "dispatched": EnvSwitch(call, on=True),
    }


def moe_case(target: Any) -> tuple[str, dict[str, Callable[[], Any]]]:
    p = Problem.of("moe", 1, 256, 256, E=8, topk=2)
    config = MOE.default_config(p, target)
    inputs = MOE.make_inputs(p, "cuda", seed=0)
    out = MOE.make_output(p, "cuda")
    launch = MOE.prepare(p, config, target, inputs, out)
    return f"moe 1x256x256 E8 top2 ({config.short()})", {
        "triton": EnvSwitch(launch, on=False),
        "pinned": EnvSwitch(launch, on=True),
    }


def floor_case() -> tuple[str, dict[str, Callable[[], Any]]]:
    """The dispatcher's own cost on this host: an op that does nothing, registered as autotune's ops are
    (a `torch.library.Library` fragment, the CUDA key, autotune::gemm's schema), called through
    `torch.ops` (`op`) and as its Python function (`no op`). No op implemented in Python costs less."""
    from autotune.kernels.torch_ops import TorchOp, register

    def impl(a: torch.Tensor, b: torch.Tensor, b_layout: str = "nk") -> torch.Tensor:
        return a

    (op,) = register(TorchOp("dispatch_floor(Tensor a, Tensor b, str b_layout='nk') -> Tensor", impl, impl))
    a = torch.randn(16, 256, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
    return "dispatch floor (an op that does nothing)", {
        "no op": lambda: impl(a, b, "nk"),
        "op": lambda: op(a, b, "nk"),
    }


def profile(name: str, variants: dict[str, Callable[[], Any]], calls: int = 2000, top: int = 12) -> None:
    """cProfile of `calls` calls of each variant: the functions with the most own time."""
    import cProfile
    import io
    import pstats

    for variant, fn in variants.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(calls):
            fn()
        prof.disable()
        torch.cuda.synchronize()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(top)
        print(f"--- {name}: {variant}, {calls} calls\n" + text.getvalue().split("\n\n", 2)[-1])


def _spread(o: dict[str, float] | None) -> str:
    """A paired overhead as median (20th..80th percentile), or '-'."""
    return f"{o['median']:+.2f} ({o['p20']:+.2f}..{o['p80']:+.2f})" if o else "-"


def main() -> int:
    ap = harness.parser(__doc__)
    harness.add_out(ap, "folder for launch_host.json")
    ap.add_argument("--batches", type=int, default=40, help="batches per variant")
    ap.add_argument("--n", type=int, default=200, help="calls per batch")
    ap.add_argument("--profile", action="store_true", help="print where each variant's host time goes")
    ap.add_argument("--only", default="", help="run the cases whose name contains this text")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/launch_host.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    info = harness.run_info(target, cases=[])
    cases = [floor_case(), dense_case(target, "triton"), quant_case(target), moe_case(target)]
    from autotune.kernels.common.target import has_tma

    if has_tma(target):
        cases.insert(1, dense_case(target, "triton_tma"))
    if target.is_nvidia:  # the GEMV kernel is the default at M = 1 there
        cases.insert(1, dense_case(target, "triton_gemv"))
    install_dispatcher(Dispatcher([Table.from_winners(target, WINNERS)], device_key=target.device_key()))
    for name, variants in cases:
        if args.only not in name:
            continue
        if args.profile:
            profile(name, variants)
        times = harness.host_us_per_call(variants, args.batches, args.n)
        row: dict[str, Any] = dict(case=name, per_batch=times)
        row["median_us"] = {k: statistics.median(v) for k, v in times.items()}
        if "dispatched" in times and "pinned" in times:
            row["dispatch_overhead_us"] = harness.paired_overhead(times["dispatched"], times["pinned"])
        if "op" in times and "no op" in times:
            row["op_overhead_us"] = harness.paired_overhead(times["op"], times["no op"])
        if "dispatched" in times and "no op" in times:
            row["entry_overhead_us"] = harness.paired_overhead(times["dispatched"], times["no op"])
        info["cases"].append(row)
    harness.write_json(args.out, "launch_host", info)
    cols = ("triton", "pinned", "no lookup", "no op", "op", "dispatched", "torch.mm")
    table = []
    for row in info["cases"]:
        med = row["median_us"]
        over = [_spread(row.get(k)) for k in ("dispatch_overhead_us", "op_overhead_us", "entry_overhead_us")]
        table.append((row["case"][:44], *(med.get(c, float("nan")) for c in cols), *over))
    title = f"{harness.describe(info)}; host µs per call, median of {args.batches} batches"
    harness.print_table(("case", *cols, "overhead", "op cost", "entry cost"), table, title=title)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
