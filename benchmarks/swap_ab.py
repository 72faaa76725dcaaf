"""Swapped operands at FP8 decode (GPU): the kernel run on C^T = B . A^T (`SWAP_AB`), row-wise or blockwise.

At M = 16 the tile of A has 16 rows, and Hopper's wgmma needs 64 rows on its M side, so the kernel falls
back to the older `mma` instructions, fed through registers. Swapped, the weight's rows are the M side
(64 or 128 of them) and the 16 tokens are wgmma's N side, read by the tensor cores straight from shared
memory. This times, on the decode rows that stay under 80% of the copy bandwidth, the best unswapped
configs (the exhaustive search's winners with 4 to 6 stages) and the heuristic default beside a grid of
swapped configs; with --layers also every other dense decode layer of the two models at TP 8, a small
unswapped grid beside the swapped one; with --defaults the heuristic default (row-wise: swapped from
M = 2 to 32) beside the same config unswapped, on every dense layer at M = 2 to 32. With --op
gemm_fp8_blockwise the rows are the blockwise decode rows under 80%, the unswapped configs their tuned
Triton winners' tiles, and --defaults puts the op's default (the Gluon kernel on Hopper) beside the
Triton kernel's default swapped; --defaults --candidate KEY=VALUE,... puts the op's default beside itself
with those knobs changed; --m64 (blockwise) the op's default at M = 64 beside the Triton kernel unswapped,
with the scales loaded ahead or not. Every config passes the Benchmarker's correctness gate first;
CUDA-graph replay, interleaved rounds, medians.

    python benchmarks/swap_ab.py --out results/ [--op gemm_fp8_blockwise] [--layers] [--defaults]
        [--candidate BLOCK_K=512,num_stages=3] [--wide] [--ahead] [--m64] [--m64-layers] [--skip-rows]

Prints a short table last; details go to --out (JSON).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import torch

from autotune import Config, Problem
from autotune.core.target import local_target
from autotune.engine.bench import Benchmarker, BenchSettings, interleaved_medians
from autotune.kernels import get_op

#: (label, M, N, K, the exhaustive search's winner as (BLOCK_M, BLOCK_N, BLOCK_K, STREAM_K)).
ROWWISE_ROWS = (
    ("deepseek-v3 mlp.gate_up", 16, 4608, 7168, (16, 64, 512, 0)),
    ("deepseek-v3 mlp.gate_up", 64, 4608, 7168, (64, 64, 256, 0)),
    ("llama-3.1-70b mlp.down", 16, 8192, 3584, (16, 32, 256, 2)),
    ("llama-3.1-70b mlp.down", 64, 8192, 3584, (64, 64, 256, 0)),
    ("llama-3.1-70b mlp.gate_up", 16, 7168, 8192, (16, 64, 512, 0)),
    ("llama-3.1-70b mlp.gate_up", 64, 7168, 8192, (64, 64, 256, 0)),
)
#: Blockwise: (label, M, N, K, the tiles of the tuned Triton winner at M = 16, else of the pointer default).
BLOCKWISE_ROWS = (
    ("deepseek-v3 mlp.gate_up", 16, 4608, 7168, (16, 64, 256, 2)),
    ("deepseek-v3 mlp.gate_up", 32, 4608, 7168, (32, 64, 256, 2)),
    ("deepseek-v3 mlp.down", 16, 7168, 2304, (16, 64, 256, 0)),
    ("llama-3.1-70b mlp.down", 16, 8192, 3584, (16, 64, 256, 0)),
    ("llama-3.1-70b mlp.gate_up", 16, 7168, 8192, (16, 32, 512, 0)),
)
ROWS = {"gemm_fp8_rowwise": ROWWISE_ROWS, "gemm_fp8_blockwise": BLOCKWISE_ROWS}
#: Shared memory of an H100 SM that one program may take.
SMEM = 227 * 1024


def cfg(bm: int, bn: int, bk: int, stages: int, *, stream: int = 0, swap: int = 0, split: int = 1) -> Config:
    return Config(backend="triton", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=split,
                  FUSED_SPLIT=int(split > 1), STREAM_K=stream, num_warps=4, num_stages=stages,
                  SWAP_AB=swap)  # fmt: skip


def fits(c: Config) -> bool:
    return (int(c["BLOCK_M"]) + int(c["BLOCK_N"])) * int(c["BLOCK_K"]) * int(c["num_stages"]) <= SMEM


def swapped(m: int, wide: bool = False, k_tiles: tuple[int, ...] = (256, 512)) -> dict[str, Config]:
    """The swapped grid; `wide` adds K tiles of 128, 7 and 8 stages and SPLIT_K 3 (outside the space),
    stream-K with one program per SM and 8 warps (M = 64: the plain 128-wide tiles split 3 ways)."""
    bm = max(16, m)
    out = {}
    for bn, bk, stages in itertools.product((64, 128), k_tiles, (4, 5, 6)):
        c = cfg(bm, bn, bk, stages, swap=1)
        if fits(c):
            out[f"swap BN{bn} BK{bk} s{stages}"] = c
    for bk, stages in ((256, 4), (256, 6), (512, 4)):
        out[f"swap BN64 BK{bk} s{stages} stream2"] = cfg(bm, 64, bk, stages, stream=2, swap=1)
    if wide:
        for bk, stages in ((128, 6), (128, 8), (256, 7), (256, 8)):
            out[f"swap BN64 BK{bk} s{stages}"] = cfg(bm, 64, bk, stages, swap=1)
        for bk, stages in ((256, 5), (256, 6), (128, 8)):
            out[f"swap BN64 BK{bk} s{stages} stream1"] = cfg(bm, 64, bk, stages, stream=1, swap=1)
        out["swap BN64 BK256 s5 w8"] = cfg(bm, 64, 256, 5, swap=1).replace(num_warps=8)
        out["swap BN128 BK256 s5 w8"] = cfg(bm, 128, 256, 5, swap=1).replace(num_warps=8)
        for bn, bk, stages, split in ((128, 256, 5, 3), (128, 256, 6, 3), (128, 128, 8, 3), (64, 256, 5, 2)):
            c = cfg(bm, bn, bk, stages, split=split, swap=int(bm < 64))
            out[f"{'swap' if bm < 64 else 'plain'} BN{bn} BK{bk} s{stages} SK{split}"] = c
    return out


def ahead_grid(m: int) -> dict[str, Config]:
    """Blockwise, swapped with SCALES_AHEAD: 2 to 5 stages, whole tiles, 2 slices summed in the launch, and
    stream-K over 2 programs per SM."""
    out = {}
    for bn, bk, stages, (split, stream) in itertools.product(
        (64, 128), (128, 256, 512), (2, 3, 4, 5), ((1, 0), (2, 0), (1, 2))
    ):
        c = cfg(max(16, m), bn, bk, stages, swap=1, split=split, stream=stream).replace(SCALES_AHEAD=1)
        if fits(c) and not (bn == 128 and (split > 1 or stream)):
            parts = f" SK{split}" if split > 1 else " stream2" if stream else ""
            out[f"swap BN{bn} BK{bk} s{stages}{parts} ahead"] = c
    return out


def plain(winner: tuple[int, ...]) -> dict[str, Config]:
    bm, bn, bk, stream = winner
    return {f"plain BN{bn} BK{bk} s{s}" + (" stream2" if stream else ""): cfg(bm, bn, bk, s, stream=stream)
            for s in (4, 5, 6)}  # fmt: skip


def best(res: dict[str, tuple[float, str]], prefix: str, ahead: bool = False) -> tuple[str, float]:
    ok = [(t, name) for name, (t, status) in res.items()
          if status == "ok" and name.startswith(prefix) and name.endswith(" ahead") == ahead]  # fmt: skip
    if not ok:
        return "-", float("nan")
    t, name = min(ok)
    return name, t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("bench-out"), help="folder for swap_ab.json")
    ap.add_argument("--op", default="gemm_fp8_rowwise", choices=sorted(ROWS), help="the FP8 op")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    ap.add_argument("--layers", action="store_true", help="also every dense decode layer of the two models")
    ap.add_argument("--defaults", action="store_true", help="the default against itself unswapped, M = 2-32")
    ap.add_argument("--wide", action="store_true", help="a wider swapped grid on the rows under 80%%")
    ap.add_argument("--skip-rows", action="store_true", help="not the rows under 80%% (with --defaults)")
    ap.add_argument(
        "--candidate",
        default="",
        metavar="KEY=VALUE,...",
        help="with --defaults: the op's default against itself with these knobs changed, where the default "
        "is swapped (blockwise: with SCALES_AHEAD) and the changed config is in the space",
    )
    ap.add_argument(
        "--m64",
        action="store_true",
        help="blockwise: at M = 64 the op's default beside the Triton kernel unswapped, scales ahead or not",
    )
    ap.add_argument(
        "--m64-layers",
        action="store_true",
        help="blockwise: as --m64 on every dense layer of the two models at M = 48 and 64 (3 Triton configs)",
    )
    ap.add_argument(
        "--ahead",
        action="store_true",
        help="blockwise: also every config with SCALES_AHEAD (next K tile's scales loaded ahead)",
    )
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/swap_ab.py needs a GPU", file=sys.stderr)
        return 2
    target = local_target()
    op = get_op(args.op)
    bench = Benchmarker(op, target, settings=BenchSettings(method="graph"))
    info: dict[str, Any] = dict(gpu=target.name, toolchain=target.toolchain, date=time.strftime("%Y-%m-%d"),
                                op=args.op)  # fmt: skip
    rows: list[dict[str, Any]] = []
    problems = [] if args.skip_rows else [(label, m, n, k, plain(w), args.wide)
                                          for label, m, n, k, w in ROWS[args.op]]  # fmt: skip
    if args.layers:
        problems += [(*lp, False) for lp in layer_problems(args.op)]
    k_tiles = (128, 256, 512) if args.op == "gemm_fp8_blockwise" else (256, 512)
    for label, m, n, k, base, wide in problems:
        p = Problem.quant(args.op, m, n, k)
        configs = {"default": op.default_config(p, target), **base, **swapped(m, wide, k_tiles)}
        if args.ahead:
            configs |= {f"{name} ahead": c.replace(SCALES_AHEAD=1) for name, c in base.items()}
            configs |= ahead_grid(m)
        res = interleaved_medians(bench, p, configs, args.rounds)
        (pn, pt), (sn, st) = best(res, "plain"), best(res, "swap")
        ahead = [x for x in (best(res, "plain", True), best(res, "swap", True)) if x[1] == x[1]]  # not NaN
        an, at = min(ahead, key=lambda x: x[1]) if ahead else ("-", float("nan"))
        rows.append(dict(layer=label, M=m, N=n, K=k, default_us=res["default"][0], plain=pn, plain_us=pt,
                         swap=sn, swap_us=st, ahead=an, ahead_us=at, bytes=p.min_bytes(),
                         times={name: v[0] for name, v in res.items()},
                         status={name: v[1] for name, v in res.items() if v[1] != "ok"}))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    info["rows"] = rows
    m64_on = args.m64 or args.m64_layers
    info["m64"] = m64 = check_m64(bench, target, args.rounds, args.m64_layers) if m64_on else []
    candidate = {k: int(v) for k, v in (kv.split("=") for kv in args.candidate.split(",") if kv)}
    info["candidate"] = candidate
    info["defaults"] = defaults = (
        check_defaults(bench, target, args.rounds, args.op, candidate) if args.defaults else []
    )
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"swap_ab_{args.op}.json").write_text(json.dumps(info, indent=1))
    print(f"\n{info['gpu']} {info['toolchain']} {info['date']}")
    print(f"{'layer':26} {'M':>3} {'default':>8} {'plain':>8} {'swapped':>8} {'gain':>6}  best swapped"
          + ("  | best ahead (µs, config)" if args.ahead else ""))  # fmt: skip
    for r in rows:
        print(f"{r['layer']:26} {r['M']:3d} {r['default_us']:8.2f} {r['plain_us']:8.2f} {r['swap_us']:8.2f} "
              f"{r['plain_us'] / r['swap_us']:6.3f}  {r['swap']}"
              + (f"  | {r['ahead_us']:.2f} {r['ahead']}" if args.ahead else ""))  # fmt: skip
    for r in m64:
        print(
            f"M = {r['M']} {r['layer']:26} default {r['default_us']:6.2f}  best Triton {r['best_us']:6.2f} "
            f"({r['best']})  best without the scales ahead {r['plain_us']:6.2f} ({r['plain']})"
        )
    for m in sorted({r["M"] for r in m64}):
        for name in sorted({n for r in m64 if r["M"] == m for n in r["times"] if n != "default"}):
            gains = [r["default_us"] / r["times"][name] for r in m64 if r["M"] == m and name in r["times"]]
            gains = [g for g in gains if g == g]
            if gains:
                geo = math.exp(sum(map(math.log, gains)) / len(gains))
                print(f"M = {m} {name:28} default / it: geomean {geo:.3f} over {len(gains)}, "
                      f"{min(gains):.3f}-{max(gains):.3f}")  # fmt: skip
    if defaults:
        rowwise = args.op == "gemm_fp8_rowwise"
        what = "plain / swapped default" if rowwise else "default / swapped Triton default"
        if candidate:
            what = "default µs / candidate µs"
        print(f"\n{'M':>3} {'problems':>8} {what + ', geomean':>42} {'min':>6} {'max':>6}")
        for m in sorted({d["M"] for d in defaults}):
            gains = [d["plain_us"] / d["default_us"] for d in defaults if d["M"] == m]
            geo = math.exp(sum(map(math.log, gains)) / len(gains))
            print(f"{m:3d} {len(gains):8d} {geo:42.3f} {min(gains):6.3f} {max(gains):6.3f}")
    return 0


def check_m64(bench: Benchmarker, target: Any, rounds: int, all_layers: bool = False) -> list[dict[str, Any]]:
    """Blockwise at M = 64, the gate/up and down layers of the two models: the op's default beside the
    Triton kernel unswapped on 64 x 64 tiles, K tiles of 256 or 512, 3 to 5 stages, scales ahead or not.
    With `all_layers`, every dense layer of the two models at TP 8 at M = 48 and 64, and of the Triton
    configs only the three that led at M = 64 (K tiles of 512 with 3 or 4 stages, 256 with 4, ahead)."""
    op = get_op("gemm_fp8_blockwise")
    out = []
    layers = [("deepseek-v3 mlp.gate_up", 64, 4608, 7168), ("deepseek-v3 mlp.down", 64, 7168, 2304),
              ("llama-3.1-70b mlp.gate_up", 64, 7168, 8192),
              ("llama-3.1-70b mlp.down", 64, 8192, 3584)]  # fmt: skip
    grid = list(itertools.product((256, 512), (3, 4, 5), (0, 1)))
    if all_layers:
        from autotune.sweeps.catalog import layer_shapes

        layers = [(f"{model} {s.label}", m, s.N, s.K) for model in ("deepseek-v3", "llama-3.1-70b")
                  for s in layer_shapes(model, tp=8) if s.op == "gemm" for m in (48, 64)]  # fmt: skip
        grid = [(512, 3, 1), (512, 4, 1), (256, 4, 1)]
    for label, m, n, k in layers:
        p = Problem.quant("gemm_fp8_blockwise", m, n, k)
        configs = {"default": op.default_config(p, target)}
        if (
            all_layers
        ):  # the gluon kernel's default: the op's default at M = 33 to 64 before the unswapped rule
            from autotune.kernels.gemm_quant_space import gluon_default_config

            if (gluon := gluon_default_config(p, target)) is not None and gluon != configs["default"]:
                configs["gluon"] = gluon
        for bk, stages, ahead in grid:
            c = cfg(64, 64, bk, stages).replace(SCALES_AHEAD=ahead)
            if fits(c) and c in op.space(p, target):
                configs[f"plain BN64 BK{bk} s{stages}" + (" ahead" if ahead else "")] = c
        res = interleaved_medians(bench, p, configs, rounds)
        (pn, pt), (an, at) = best(res, "plain"), best(res, "plain", True)
        out.append(dict(layer=label, M=m, N=n, K=k, default=configs["default"].short(),
                        default_us=res["default"][0], plain=pn, plain_us=pt, best=an, best_us=at,
                        times={name: v[0] for name, v in res.items()},
                        status={name: v[1] for name, v in res.items() if v[1] != "ok"}))  # fmt: skip
        print(json.dumps(out[-1]), flush=True)
    return out


def check_defaults(
    bench: Benchmarker, target: Any, rounds: int, op_name: str, candidate: dict[str, int] | None = None
) -> list[dict[str, Any]]:
    """Every dense layer of the two models at TP 8, M = 2 to 32: row-wise, the default (swapped) beside the
    same config unswapped ("plain"); blockwise, the op's default ("plain") beside the Triton kernel's
    default swapped, with SCALES_AHEAD and 4 stages ("default"). With `candidate`, the op's default
    ("plain") beside itself with those knobs changed ("default"), where the default is swapped and the
    changed config is in the space."""
    from autotune.kernels.gemm_quant_space import _triton_default
    from autotune.sweeps.catalog import layer_shapes

    op = get_op(op_name)
    out = []
    for model in ("deepseek-v3", "llama-3.1-70b"):
        for s in layer_shapes(model, tp=8):
            for m in (2, 4, 8, 16, 32):
                if s.op != "gemm":
                    continue
                p = Problem.quant(op_name, m, s.N, s.K)
                if candidate:
                    plain = op.default_config(p, target)
                    default = plain.replace(**candidate)
                    if default == plain or default not in op.space(p, target):
                        continue
                    configs = {"default": default, "plain": plain}
                elif op_name == "gemm_fp8_rowwise":
                    default = op.default_config(p, target)
                    configs = {"default": default, "plain": default.replace(SWAP_AB=0)}
                else:
                    default = _triton_default(p, target)
                    swap = int(int(default["BLOCK_N"]) >= 64)
                    default = default.replace(SWAP_AB=swap, SCALES_AHEAD=swap, num_stages=4)
                    configs = {"default": default, "plain": op.default_config(p, target)}
                if not int(default.get("SWAP_AB", 0)):
                    continue
                res = interleaved_medians(bench, p, configs, rounds)
                out.append(dict(layer=f"{model} {s.label}", M=m, N=s.N, K=s.K, config=default.short(),
                                default_us=res["default"][0], plain_us=res["plain"][0],
                                status={k: v[1] for k, v in res.items() if v[1] != "ok"}))  # fmt: skip
                print(json.dumps(out[-1]), flush=True)
    return out


def layer_problems(op_name: str) -> list[tuple[str, int, int, int, dict[str, Config]]]:
    """Every dense layer of the two models at TP 8 outside ROWS, M = 16 and 64, with a small plain grid."""
    from autotune.sweeps.catalog import layer_shapes

    seen = {(m, n, k) for _, m, n, k, _ in ROWS[op_name]}
    out = []
    for model in ("deepseek-v3", "llama-3.1-70b"):
        for s in layer_shapes(model, tp=8):
            for m in (16, 64):
                if s.op != "gemm" or (m, s.N, s.K) in seen:
                    continue
                seen.add((m, s.N, s.K))
                grid = {f"plain BN{bn} BK{bk} s{st}": cfg(m, bn, bk, st)
                        for bn, bk, st in itertools.product((32, 64), (256, 512), (4, 6))}  # fmt: skip
                out.append((f"{model} {s.label}", m, s.N, s.K, {k: c for k, c in grid.items() if fits(c)}))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
