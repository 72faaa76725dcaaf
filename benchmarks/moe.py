"""Fused MoE served at every ladder M (GPU): sweep real models' MoE layers as the README says, emit the
table, and time at every M of the serving ladder, in one run, three calls of the run-time entry point
`autotune.kernels.fused_moe` on the same inputs:

- `served`: the config the table serves at that M (either kernel structure, whichever the profile found
  faster);
- `vllm`: the config of vLLM's shipped file for this GPU and (E, N) at the file's closest M key (as vLLM
  picks it), run in vLLM's kernel structure (`GATE_UP_FUSED=0`: the w1 GEMM over all 2N columns, then
  SiLU·up as its own step; `B_TMA=0`: the weights loaded by pointer);
- `fallback`: the config vLLM runs where it has no file (`autotune.kernels.moe.formats.vllm.fallback_at`),
  in the same structure.

By default vLLM's files are imported into the database before the sweep (`autotune import`), as a user
replacing them does: the sweep's M profile then also times the file's config at each M. All three pay the
same entry-point costs (routing alignment, workspaces), are timed as served (CUDA-graph
replays over rotating inputs) in interleaved rounds, and each output is checked against the reference
first. Routing is uniform over the experts (seeded). Each row also gets `bound_us`, the least time any
kernel could take: the op's bytes (the weights of the experts uniform routing touches, tokens in and out)
at the device's copy bandwidth, or its FLOPs at the dense peak of an 8192-cube library GEMM, whichever is
longer, both measured in the same run; the file's time over it is the most any config could gain there.

    python benchmarks/moe.py --vllm-configs DIR --out results/          # sweep, then measure
    python benchmarks/moe.py --phase measure --vllm-configs DIR --out results/

`--vllm-configs` is a folder holding vLLM's shipped config files (its fused_moe/configs folder); they are
read, never copied into this project. `--off-ladder` adds M values the profile never times (between its
ladder M and between the file's M keys): there the table serves from its ranges' rules alone; those rows
are marked `off_ladder` and summed apart. Prints a short table last; every row goes to --out (moe.json).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import harness

from autotune import Config, Problem
from autotune.core.ladder import serving_ladder
from autotune.core.target import Target, local_target
from autotune.dispatch.ranges import imported_pick
from autotune.engine.bench import Benchmarker, ServedTiming, interleaved_medians
from autotune.kernels import served_config
from autotune.kernels.moe.formats.vllm import VLLM_KEYS, fallback_at, plain_keys
from autotune.kernels.moe.op import MOE
from autotune.kernels.moe.params import experts
from autotune.sweeps import load_spec
from autotune.sweeps.verify import SERVED, VERIFY_SETTINGS

if TYPE_CHECKING:
    import torch

    from autotune.core.op import Inputs, Launch

HERE = Path(__file__).resolve().parent
#: Rounds go on (up to three times --rounds) while a variant's round medians spread more than this: long
#: calls run near the power limit, where the clock of a short replay moves by several percent.
PRECISION = 0.005


class EntryCall(ServedTiming):
    """The MoE timed as served through `autotune.kernels.fused_moe`: `SERVED` is the table's config, any
    other config is passed as the call's `config`."""

    def prepare(
        self, problem: Problem, config: Config, target: Target, inputs: Inputs, out: torch.Tensor
    ) -> Launch:
        from autotune.kernels import fused_moe
        from autotune.kernels.served import served_launch

        if config == SERVED:
            return served_launch(self.op, problem, target, inputs, out)
        x, w1, w2, weights, ids, w1s, w2s = inputs
        block = [128, 128] if w1s is not None and w1.dtype.is_floating_point else None  # FP8: 128x128 scales

        def launch() -> None:
            fused_moe(x, w1, w2, weights, ids, w1_scale=w1s, w2_scale=w2s, block_shape=block, out=out,
                      target=target, config=config)  # fmt: skip

        return launch


def vllm_file(folder: Path, problem: Problem, target: Target) -> tuple[dict[int, Config], str]:
    """vLLM's shipped configs for `problem`'s (E, N) on `target` by M key, in vLLM's structure (the
    values of our extra knobs that mean it: `plain_keys`); ({}, why) without a file."""
    dtype = ",dtype=fp8_w8a8,block_shape=[128,128]" if problem.dtype_b.startswith("fp8") else ""
    name = f"E={experts(problem)[0]},N={problem.N},device_name={target.name.replace(' ', '_')}{dtype}.json"
    path = folder / name
    if not path.is_file():
        return {}, f"no {name}"
    table = json.loads(path.read_text())
    configs = {
        int(m): Config(backend="triton", **{k: int(c[k]) for k in VLLM_KEYS}, **plain_keys(target))
        for m, c in table.items()
    }
    return configs, name


def precompile(families: list[tuple[Problem, tuple[int, ...], dict[int, Config]]], target: Target) -> None:
    """The vLLM and fallback configs compiled on the compile pool ahead of timing (Triton's disk cache),
    at an M of each of the kernels' specializations."""
    from autotune.engine.compile import CompilePool

    t0 = time.perf_counter()
    jobs = 0
    with CompilePool(target) as pool:
        futures = []
        for problem, ladder, shipped in families:
            for M in sorted({1, 3, 16, 48, 512, max(ladder)}):
                fallback = fallback_at(problem, target, M)
                configs = {fallback} if fallback is not None else set()
                if shipped:
                    configs.add(imported_pick(shipped, M))
                futures += [pool.submit(MOE, problem.with_m(M), c) for c in configs]
        for f in futures:
            jobs += 1
            try:
                f.result()
            except Exception as exc:  # a config that fails to compile fails again when timed, with its status
                print(f"precompile: {str(exc).splitlines()[0][:200]}", flush=True)
    print(f"precompiled {jobs} (config, M) in {time.perf_counter() - t0:.0f} s", flush=True)


def mm_tflops(dtype: str, n: int = 8192, reps: int = 20) -> float:
    """The dense peak a library GEMM reaches here: an n x n x n `torch.mm` (bf16) or `torch._scaled_mm`
    (FP8, per-tensor scales), median of `reps`."""
    import torch

    a = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    b = torch.randn(n, n, device="cuda").to(torch.bfloat16)
    if dtype.startswith("fp8"):
        one = torch.ones((), device="cuda")
        a8, b8 = a.to(torch.float8_e4m3fn), b.t().contiguous().to(torch.float8_e4m3fn).t()

        def call() -> Any:
            return torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    else:

        def call() -> Any:
            return torch.mm(a, b)

    return 2 * n**3 / harness.median_s(call, reps, warmup=3) / 1e12


#: M values off the serving ladder (between its M, and between vLLM's usual M keys) timed besides it.
OFF_LADDER = (5, 12, 20, 100, 300, 700, 900, 1300, 1900, 2600, 3500)


def measure(
    spec: Path, table_path: Path, folder: Path | None, rounds: int, max_m: int | None, off: tuple[int, ...]
) -> list[dict[str, Any]]:
    from autotune.dispatch import Dispatcher, Table, install_dispatcher

    target = local_target()
    copy = harness.copy_gbps()
    peaks = {d: mm_tflops(d) for d in ("bf16", "fp8e4m3")}
    print(f"copy {copy:.0f} GB/s, GEMM peak bf16 {peaks['bf16']:.0f} / FP8 {peaks['fp8e4m3']:.0f} TFLOP/s",
          flush=True)  # fmt: skip
    table = Table.load(table_path)
    install_dispatcher(Dispatcher([table], device_key=target, untuned_log="/dev/null"))
    families: dict[Problem, list[int]] = {}
    for _, problem in load_spec(spec).problems():
        families.setdefault(problem.with_m(1), []).append(problem.M)
    todo = []
    for family, tuned in families.items():
        ladder = serving_ladder(max_m or max(tuned), tuned)
        shipped, source = vllm_file(folder, family, target) if folder else ({}, "no folder")
        print(f"{family}: {len(ladder)} M, vLLM file: {source}", flush=True)
        todo.append((family, ladder, shipped))
    precompile(todo, target)
    bench = Benchmarker(EntryCall(MOE), target, settings=VERIFY_SETTINGS)
    rows = []
    for family, ladder, shipped in todo:
        fp8 = family.dtype_b.startswith("fp8")
        for M in sorted(set(ladder) | {m for m in off if m <= max(ladder)}):
            p = family.with_m(M)
            variants = {"served": SERVED}
            fallback = fallback_at(p, target, M)
            if fallback is not None:
                variants["fallback"] = fallback
            if shipped:
                variants["vllm"] = imported_pick(shipped, M)
            times = interleaved_medians(
                bench, p, variants, rounds, precision=PRECISION, max_rounds=3 * rounds
            )
            e, topk = experts(p)
            row: dict[str, Any] = dict(family=str(family).replace(" M=1 ", " "), M=M, E=e, N=p.N, K=p.K,
                                       topk=topk, weights=p.dtype_b, off_ladder=M not in ladder,
                                       served=served_config(MOE, p, target).short())  # fmt: skip
            for name, (us, status) in times.items():
                row[f"{name}_us"] = us if status == "ok" else math.nan
                if status != "ok":
                    row[f"{name}_status"] = status[:300]
            peak = peaks["fp8e4m3" if fp8 else "bf16"]
            row["bound_us"] = max(MOE.problem_bytes(p) / copy / 1e3, MOE.problem_flops(p) / peak / 1e6)
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def report(rows: list[dict[str, Any]]) -> None:
    """Per family (ladder M) and for the off-ladder M: rows, geomean and lowest of vLLM's file time /
    served time and of the fallback's, rows where the served call is slower than the file, and the most
    any call could gain on the file (its time over `bound_us`: the op's bytes at the copy bandwidth or its
    FLOPs at the GEMM peak, measured in the same run); then the worst rows of either."""
    by: dict[str, list[dict[str, Any]]] = {}
    off = [r for r in rows if r.get("off_ladder")]
    ladder = [r for r in rows if not r.get("off_ladder")]
    for r in ladder:
        by.setdefault(r["family"], []).append(r)
    table = []
    everything: dict[str, list[float]] = {"vllm": [], "fallback": []}
    for fam, rs in by.items():
        cells: list[Any] = [fam, len(rs)]
        for kind in ("vllm", "fallback"):
            ratios = [r[f"{kind}_us"] / r["served_us"] for r in rs if r.get(f"{kind}_us", math.nan) > 0]
            everything[kind] += ratios
            cells += [harness.geomean(ratios), min(ratios, default=math.nan), sum(x < 1.0 for x in ratios)]
        cells.append(harness.geomean(r["vllm_us"] / r["bound_us"] for r in rs if r.get("vllm_us", 0) > 0))
        table.append(cells)
    cells = ["all", len(ladder)]
    for kind in ("vllm", "fallback"):
        xs = everything[kind]
        cells += [harness.geomean(xs), min(xs, default=math.nan), sum(x < 1.0 for x in xs)]
    cells.append(harness.geomean(r["vllm_us"] / r["bound_us"] for r in ladder if r.get("vllm_us", 0) > 0))
    table.append(cells)
    if off:
        cells = ["off the ladder", len(off)]
        for kind in ("vllm", "fallback"):
            xs = [r[f"{kind}_us"] / r["served_us"] for r in off if r.get(f"{kind}_us", math.nan) > 0]
            cells += [harness.geomean(xs), min(xs, default=math.nan), sum(x < 1.0 for x in xs)]
        cells.append(harness.geomean(r["vllm_us"] / r["bound_us"] for r in off if r.get("vllm_us", 0) > 0))
        table.append(cells)
    worst = sorted(
        (r for r in rows if r.get("vllm_us", math.nan) > 0), key=lambda r: r["vllm_us"] / r["served_us"]
    )
    print("\nworst rows (vLLM's file µs / served µs):")
    for r in worst[:10]:
        print(f"  {r['vllm_us'] / r['served_us']:.3f}  M={r['M']:<5} {r['family']}: served {r['served']} "
              f"{r['served_us']:.1f} µs, file {r['vllm_us']:.1f} µs")  # fmt: skip
    failed = [r for r in rows if any(k.endswith("_status") for k in r)]
    for r in failed:
        print(f"  not timed: M={r['M']} {r['family']}: " + "; ".join(
            f"{k[:-7]}: {v[:120]}" for k, v in r.items() if k.endswith("_status")))  # fmt: skip
    cols = ("family", "rows", "vs file geomean", "vs file min", "slower than file", "vs fallback geomean",
            "vs fallback min", "slower than fallback", "bound vs file geomean")  # fmt: skip
    harness.print_table(cols, table, digits=(0, 0, 3, 3, 0, 3, 3, 0, 3),
                        title="served vs vLLM (ratio = vLLM µs / served µs)")  # fmt: skip


def main() -> int:
    ap = harness.parser(__doc__)
    ap.add_argument("--spec", type=Path, default=HERE / "moe_serve.toml", help="the sweep spec")
    ap.add_argument("--phase", choices=("all", "sweep", "measure"), default="all")
    ap.add_argument("--db", type=Path, help="the database (default OUT/moe.db)")
    ap.add_argument("--vllm-configs", type=Path, help="folder with vLLM's shipped fused-MoE config files")
    harness.add_out(ap, "results folder")
    ap.add_argument("--no-import", action="store_true", help="sweep without importing vLLM's files first "
                    "(by default they are imported, as a user replacing them does: the profile then also "
                    "times the file's config at each M)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=3, help="interleaved measurement rounds")
    ap.add_argument("--max-m", type=int, help="the ladder's largest M (default: the spec's largest)")
    ap.add_argument("--off-ladder", type=int, nargs="*", default=list(OFF_LADDER),
                    help="M values off the serving ladder to time too (none: only the ladder)")  # fmt: skip
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    db = args.db or args.out / "moe.db"
    t0 = time.perf_counter()
    if args.phase in ("all", "sweep"):
        if args.vllm_configs and not args.no_import:
            code, text = harness.run_logged(
                [*harness.CLI, "import", str(args.vllm_configs), "--db", str(db)], args.out / "import.log"
            )
            print(text.strip().splitlines()[-1] if text.strip() else "", flush=True)
            if code != 0:
                raise SystemExit(f"import failed with exit code {code}")
        cmd = [*harness.CLI, "sweep", str(args.spec), "--db", str(db), "--no-progress", "--log-dir", "none"]
        code, text = harness.run_logged(cmd, args.out / "sweep.log")
        print("\n".join(text.strip().splitlines()[-3:]), flush=True)
        if code != 0:
            raise SystemExit(f"sweep failed with exit code {code}")
    if args.phase in ("all", "measure"):
        table = harness.emit_table(db, args.out)
        rows = measure(args.spec, table, args.vllm_configs, args.rounds, args.max_m, tuple(args.off_ladder))
        harness.write_json(args.out, "moe", harness.run_info(local_target(), args=vars(args), rows=rows))
        report(rows)
    print(f"{args.phase}: {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
