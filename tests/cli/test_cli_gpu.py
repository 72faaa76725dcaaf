"""GPU tests of the CLI: a sweep on every GPU of the host. Skipped without a CUDA or ROCm GPU."""

from __future__ import annotations

import pytest
import torch

from autotune.core.result import Source, TrialStatus

pytestmark = pytest.mark.gpu


def test_sweep_cli_on_every_gpu_of_the_host(tmp_path) -> None:
    """`autotune sweep` with the default executor: a worker process per visible GPU, trials stored."""
    from autotune.cli import main
    from autotune.db import Store

    spec = tmp_path / "s.toml"
    spec.write_text('name = "gpus"\n[[sweep]]\nop = "gemm"\ndtype = "bf16"\nm = [16, 64]\n'
                    'nk = [[1024, 1024]]\nstrategy = "exhaustive"\ntrials = 4\n')  # fmt: skip
    db = tmp_path / "g.db"
    argv = ["sweep", str(spec), "--db", str(db), "--no-progress", "--log-dir", str(tmp_path / "logs")]
    assert main(argv) == 0
    with Store(str(db)) as store:
        stored = [t for t in store.trials() if t.status is not TrialStatus.PRUNED]
        [sweep] = store.sweeps()
    trials = [t for t in stored if t.source is Source.MEASURED]
    final = [t for t in stored if t.source is Source.FINAL]  # each problem's finalists, timed again
    profile = [t for t in stored if t.source is Source.PROFILE]  # the shape at its serving ladder of M
    assert len(trials) == 8 and all(t.extra.get("worker", "").startswith("gpu") for t in trials)
    assert {t.problem.M for t in final} == {16, 64} and all(t.extra["final_rounds"] >= 1 for t in final)
    # the profile is sparse: the first, the tuned and the last ladder M always; the others (every fourth,
    # then the M between them) only beside an M where a candidate came close to the vendor library
    ladder = {1, 2, 3, 4, 6, 8, 16, 24, 32, 40, 48, 56, 64}
    assert {1, 16, 64} <= {t.problem.M for t in profile} <= ladder
    assert all(t.timing is not None and t.timing.method == "graph" for t in final + profile if t.ok)
    assert len(trials) + len(final) + len(profile) == len(stored)
    if torch.cuda.device_count() > 1:  # two problems on two or more GPUs: each on its own worker
        assert len({t.extra["worker"] for t in trials}) == 2
    assert sweep.status == "finished" and sweep.workers == torch.cuda.device_count()
    assert any(p.suffix == ".log" for p in (tmp_path / "logs").iterdir())
