"""Probe: tune the serve-every-M layers between the buckets; print our best finalist against the vendor
in the final rounds (same round, same inputs), per M."""

import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from autotune.core.result import Source, TrialStatus
from autotune.db.store import Store

out = Path(sys.argv[1])
for name, spec in (("mid", "benchmarks/mid_m_probe.toml"), ("deep", "benchmarks/mid_m_probe_deep.toml")):
    db = out / f"{name}.db"
    cmd = [sys.executable, "-m", "autotune.cli", "sweep", spec, "--db", str(db), "--no-progress",
           "--log-dir", "none"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    (out / f"{name}.log").write_text(r.stdout + r.stderr)
    print(name, "exit", r.returncode, (r.stdout + r.stderr).strip().splitlines()[-1:], flush=True)
    store = Store(f"sqlite:///{db}")
    by_problem = defaultdict(list)
    for t in store.trials(source=Source.FINAL, status=TrialStatus.OK):
        by_problem[t.problem].append(t)
    by_m = defaultdict(list)
    for p, ts in by_problem.items():
        vendor = min((t.time_us for t in ts if t.config.get("backend") == "torch"), default=None)
        ours = sorted((t for t in ts if t.config.get("backend") != "torch"), key=lambda t: t.time_us)
        if vendor and ours:
            b = ours[0]
            by_m[p.M].append((vendor / b.time_us, p.N, p.K, vendor, b.time_us, dict(b.config)))
    for m, xs in sorted(by_m.items()):
        s = [x[0] for x in xs]
        g = math.exp(sum(math.log(v) for v in s) / len(s))
        print(f"{name} M={m}: n={len(s)} geomean {g:.3f} min {min(s):.3f} max {max(s):.3f} "
              f">=1.05: {sum(v >= 1.05 for v in s)}")
        for v, n, k, vt, ot, cfg in sorted(xs, key=lambda x: x[0]):
            print(f"    {v:.3f} N={n} K={k} vendor {vt:.1f} ours {ot:.1f} {cfg}")
