"""Would TMA loads read an FP8 decode layer faster? A probe (GPU) of the tensor-descriptor kernel on FP8.

The row-wise FP8 kernel loads its tiles through pointers (`cp.async`). The dense `triton_tma` kernel loads
them through tensor descriptors (TMA). On the decode rows still under 80% of the copy bandwidth, for a
grid of tiles, K tiles and stages, swapped where M < 64 (the weight's rows on wgmma's M side, the tokens
on its N side), this times:
- `unscaled`: that dense kernel on the FP8 operands, without the row-wise scales (its result checked
  against the unscaled product; a swapped C comes out transposed, (N, M));
- `op`: the row-wise op's own TMA kernel (`triton_tma`, `kernels/gemm_fp8_tma.py`), scales included,
  C stored transposed into (M, N) where swapped, checked against the op's reference;
- `pointer`: the op's pointer-kernel default.
Same timing as `read_ceiling.py` (a CUDA graph of 20 launches cycling over enough input copies to miss
L2, 5 replays, median), fractions of a 1 GiB copy.

With --defaults instead: on every dense layer of the two models at TP 8 and M = 2 to 64 whose default
is the TMA kernel, that default beside the pointer kernel's default (swapped below M = 64) and the same
unswapped (the default before either), scales included and checked.

    PYTHONPATH=$PWD python benchmarks/fp8_tma_decode.py [--out DIR] [--defaults]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

from autotune import Config, Problem
from autotune.engine.bench import rel_error

sys.path.insert(0, str(Path(__file__).parent))
from gemm_quant import copy_bandwidth_gbps
from read_ceiling import Layer, copies_for, time_us

OP = "gemm_fp8_rowwise"
ROWS = (
    ("deepseek-v3 mlp.gate_up", 16, 4608, 7168),
    ("deepseek-v3 mlp.gate_up", 64, 4608, 7168),
    ("llama-3.1-70b mlp.down", 16, 8192, 3584),
    ("llama-3.1-70b mlp.down", 64, 8192, 3584),
)
SMEM = 227 * 1024


def tma_configs(m: int) -> list[Config]:
    out = []
    if m < 64:  # swapped: the kernel's M tile runs along N
        grid = itertools.product((64, 128), (16,), (128, 256, 512), (3, 4, 5, 6, 8))
    else:
        grid = itertools.product((64,), (64, 128), (128, 256), (3, 4, 5, 6))
    for bm, bn, bk, stages in grid:
        if (bm + bn) * bk * stages + bm * bn * 2 <= SMEM:
            out.append(Config(backend="triton_tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=1, SPLIT_K=1,
                              PERSISTENT=0, TAIL_SPLIT=0, num_warps=4, num_stages=stages))  # fmt: skip
    return out


def time_tma(layer: Layer, config: Config, swap: bool, sms: int) -> float:
    from autotune.kernels.gemm_tma import tma_launcher

    M, N, K = layer.problem.M, layer.problem.N, layer.problem.K
    launch = tma_launcher(config, num_sms=sms)

    def run(inputs: Any, out: torch.Tensor) -> None:
        a, b = inputs[0], inputs[1]
        if swap:  # C^T (N, M) = B . A^T
            launch(b, a, out, False, N, M, K)
        else:
            launch(a, b, out, False, M, N, K)

    shape = (N, M) if swap else (M, N)
    first = torch.full(shape, float("nan"), device="cuda", dtype=torch.bfloat16)
    run(layer.inputs[0], first)
    a, b = layer.inputs[0][0].float(), layer.inputs[0][1].float()
    want = (b @ a.t()) if swap else (a @ b.t())
    err = rel_error(first.float(), want)
    if not err <= 0.01:
        raise AssertionError(f"TMA {config.short()}: relative error {err}")
    outs = [torch.empty(shape, device="cuda", dtype=torch.bfloat16) for _ in layer.inputs]
    return time_us([functools.partial(run, x, o) for x, o in zip(layer.inputs, outs, strict=True)])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "bench-out")))
    ap.add_argument("--defaults", action="store_true", help="the TMA default against the pointer kernel's")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/fp8_tma_decode.py needs a GPU", file=sys.stderr)
        return 2
    props = torch.cuda.get_device_properties(0)
    l2, sms = int(props.L2_cache_size), int(props.multi_processor_count)
    copy = copy_bandwidth_gbps()
    if args.defaults:
        return check_defaults(args.out, l2, copy)
    from autotune.kernels.gemm_quant_space import _triton_default

    rows: list[dict[str, Any]] = []
    for label, m, n, k in ROWS:
        p = Problem.quant(OP, m, n, k)
        layer = Layer(p, l2)
        pointer = _triton_default(p, layer.target)
        times: dict[str, float] = {"pointer": layer.time_us(pointer)}
        errors: dict[str, str] = {}
        for c in tma_configs(m):
            for kind in ("unscaled", "op"):
                name = f"{kind} {c.short()}"
                try:
                    if kind == "unscaled":
                        times[name] = time_tma(layer, c, m < 64, sms)
                    else:
                        times[name] = layer.time_us(op_config(c, m < 64))
                except Exception as exc:  # out of resources, a wrong result: recorded, not fatal
                    errors[name] = f"{type(exc).__name__}: {str(exc)[:160]}"
        gb = p.min_bytes() / 1e3
        best = {kind: min((t, name) for name, t in times.items() if name.startswith(kind))
                for kind in ("unscaled", "op")}  # fmt: skip
        rows.append(dict(layer=label, M=m, N=n, K=k, copies=copies_for(int(p.min_bytes()), l2),
                         pointer=pointer.short(), times=times, errors=errors,
                         best={kind: name for kind, (_, name) in best.items()},
                         copy={kind: gb / t / copy for kind, (t, _) in best.items()}
                         | {"pointer": gb / times["pointer"] / copy}))  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
    info = dict(gpu=props.name, torch=torch.__version__, date=time.strftime("%Y-%m-%d"), copy_gbps=copy,
                rows=rows)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fp8_tma_decode.json").write_text(json.dumps(info, indent=1))
    print(f"\n{props.name}, copy {copy:.0f} GB/s")
    print(f"{'layer':26} {'M':>3} {'pointer µs':>10} {'unscaled TMA µs':>15} {'op TMA µs':>9}  "
          "copy % (pointer / unscaled / op); best op TMA config")  # fmt: skip
    for r in rows:
        t, b, c = r["times"], r["best"], r["copy"]
        print(f"{r['layer']:26} {r['M']:3d} {t['pointer']:10.2f} {t[b['unscaled']]:15.2f} {t[b['op']]:9.2f}  "
              f"{100 * c['pointer']:.0f} / {100 * c['unscaled']:.0f} / {100 * c['op']:.0f}; "
              f"{b['op']}")  # fmt: skip
    return 0


def op_config(c: Config, swap: bool) -> Config:
    """The op's config of a probe config (the kernel's tiles): swapped, BLOCK_M tiles M and BLOCK_N N."""
    bm, bn = (c["BLOCK_N"], c["BLOCK_M"]) if swap else (c["BLOCK_M"], c["BLOCK_N"])
    return Config(backend="triton_tma", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=c["BLOCK_K"], GROUP_M=1, SPLIT_K=1,
                  PERSISTENT=0, SWAP_AB=int(swap), num_warps=c["num_warps"],
                  num_stages=c["num_stages"])  # fmt: skip


def check_defaults(out_dir: Path, l2: int, copy: float) -> int:
    from autotune.kernels.gemm_quant_space import _triton_default
    from autotune.sweeps.catalog import layer_shapes

    rows: list[dict[str, Any]] = []
    for model in ("deepseek-v3", "llama-3.1-70b"):
        for s in layer_shapes(model, tp=8):
            for m in (2, 4, 8, 16, 32, 64):
                p = Problem.quant(OP, m, s.N, s.K)
                if s.op != "gemm":
                    continue
                layer = Layer(p, l2)
                default = layer.op.default_config(p, layer.target)
                if default.backend != "triton_tma":
                    continue
                pointer = _triton_default(p, layer.target)
                unswapped = pointer.replace(SWAP_AB=0)
                configs = {"tma": default, "pointer": pointer, "pointer unswapped": unswapped}
                times = {name: layer.time_us(c) for name, c in configs.items()}
                gb = p.min_bytes() / 1e3
                rows.append(dict(layer=f"{model} {s.label}", M=m, N=s.N, K=s.K, tma=default.short(),
                                 pointer=pointer.short(), times=times,
                                 copy={k: gb / t / copy for k, t in times.items()}))  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "fp8_tma_defaults.json").write_text(json.dumps(dict(copy_gbps=copy, rows=rows), indent=1))
    print(f"\ncopy {copy:.0f} GB/s; geomean speed-up of the TMA default over the pointer kernel's")
    print(f"{'M':>3} {'problems':>8} {'vs pointer':>10} {'min':>6} {'max':>6} {'vs unswapped':>12}")
    for m in sorted({r["M"] for r in rows}):
        sub = [r["times"] for r in rows if r["M"] == m]
        ratios = [t["pointer"] / t["tma"] for t in sub]
        old = [t["pointer unswapped"] / t["tma"] for t in sub]
        print(f"{m:3d} {len(sub):8d} {geomean(ratios):10.3f} {min(ratios):6.3f} {max(ratios):6.3f} "
              f"{geomean(old):12.3f}")  # fmt: skip
    return 0


def geomean(values: list[float]) -> float:
    import math

    return math.exp(sum(map(math.log, values)) / len(values))


if __name__ == "__main__":
    raise SystemExit(main())
