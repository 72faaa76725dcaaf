"""Diagnostic (GPU): the same torch.mm through different call paths, graph replay vs events.

python benchmarks/vendor_paths.py
"""

from __future__ import annotations

import dataclasses
import sys

import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker, BenchSettings
from autotune.kernels import GEMM, gemm


class _Path:
    """A TunableOp facade whose launch is one way of calling torch.mm / gemm."""

    name = "gemm"

    def __init__(self, how: str) -> None:
        self.how = how

    def __getattr__(self, name: str):
        return getattr(GEMM, name)

    def prepare(self, problem, config, target, inputs, out):
        a, b = inputs
        bt = b.t()
        how = self.how
        first = [True]

        def launch() -> None:
            if how == "mm_out":
                torch.mm(a, bt, out=out)
                return
            c = torch.mm(a, bt) if how == "mm_alloc" else gemm(a, b)
            if first[0]:
                out.copy_(c)
                first[0] = False

        return launch


def main() -> int:
    target = local_target()
    from autotune.dispatch import Dispatcher, Table
    from autotune.dispatch import dispatcher as dmod

    shapes = [Problem.gemm(64, 6144, 4096), Problem.gemm(1, 1280, 8192), Problem.gemm(16, 6144, 4096)]
    dmod._default = Dispatcher(
        [Table.from_winners(target, [(p, Config(backend="torch"), None) for p in shapes])],
        device_key=target.device_key(),
    )
    events = dataclasses.replace(BenchSettings(), graph_threshold_us=0.0)
    print(f"{'shape':>18} {'path':>10} {'graph us':>9} {'events us':>9}")
    for p in shapes:
        for how in ("mm_out", "mm_alloc", "gemm"):
            g = Benchmarker(_Path(how), target).run(p, Config(backend="torch"))
            e = Benchmarker(_Path(how), target, settings=events).run(p, Config(backend="torch"))
            print(
                f"{p.M}x{p.N}x{p.K:>6} {how:>10} {g.time_us or float('nan'):9.2f} "
                f"{e.time_us or float('nan'):9.2f}"
                f"  [{g.timing.method if g.timing else g.status.value}]"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
