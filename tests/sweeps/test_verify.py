"""`autotune verify`: the served call against the vendor library at every ladder M (a fake benchmarker)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune import Config, Problem, Target, Timing, TrialResult, TrialStatus
from autotune.dispatch import Table
from autotune.dispatch.ranges import Range
from autotune.dispatch.table import Entry
from autotune.kernels import GEMM
from autotune.sweeps.verify import SERVED, Family, family_of_entry, vendor_config, verify

INTERP = Target.interpreter_target()
VENDOR = Config(backend="torch")
OURS = Config(backend="triton", BLOCK_M=16)


class FakeBench:
    """Times SERVED at `served_us(M)` and the vendor at `vendor_us(M)`; counts the runs."""

    def __init__(self, served_us: object, vendor_us: object, fail_at: int | None = None) -> None:
        self.served_us, self.vendor_us, self.fail_at = served_us, vendor_us, fail_at
        self.runs: list[tuple[int, Config, bool]] = []

    def run(self, problem: Problem, config: Config, *, full: bool = False) -> TrialResult:
        self.runs.append((problem.M, config, full))
        if config == SERVED and self.fail_at == problem.M:
            return TrialResult(config, TrialStatus.WRONG_RESULT, error="wrong result: 0.5 > 0.01")
        t = (self.served_us if config == SERVED else self.vendor_us)(problem.M)  # type: ignore[operator]
        return TrialResult(config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 5, "graph"))


def served_by_m(op: object, problem: Problem, target: Target) -> Config:
    return OURS if problem.M <= 16 else VENDOR


def test_rows_ratio_and_the_vendor_rows_not_timed() -> None:
    bench = FakeBench(served_us=lambda m: 8.0, vendor_us=lambda m: 10.0)
    fam = Family(GEMM, Problem.of("gemm", 1, 256, 512), (1, 8, 16, 64, 512))
    report = verify([fam], target=INTERP, bench_for=lambda op: bench, served_config=served_by_m, rounds=3)
    by_m = {r.M: r for r in report.rows}
    assert [r.M for r in report.rows] == [1, 8, 16, 64, 512]
    assert by_m[8].ratio == pytest.approx(1.25) and by_m[8].status == "timed"
    assert by_m[8].served == OURS.to_dict() and by_m[8].served_us == 8.0 and by_m[8].vendor_us == 10.0
    assert by_m[64].ratio == 1.0 and by_m[64].status == "vendor" and by_m[64].served_us is None
    # only the rows served by another config are timed: both sides, 3 interleaved rounds each, fully
    assert sorted({m for m, _, _ in bench.runs}) == [1, 8, 16]
    assert len(bench.runs) == 3 * 2 * 3 and all(full for _, _, full in bench.runs)
    assert report.ok and not report.failing()
    summary = {s["family"]: s for s in report.summary()}
    assert summary["all"]["rows"] == 5 and summary["all"]["vendor_rows"] == 2
    assert summary["all"]["geomean"] == pytest.approx(1.25 ** (3 / 5))
    assert summary["all"]["min"] == 1.0


def test_a_slow_row_or_a_wrong_result_fails() -> None:
    bench = FakeBench(served_us=lambda m: 10.0 if m != 8 else 12.0, vendor_us=lambda m: 10.0, fail_at=16)
    fam = Family(GEMM, Problem.of("gemm", 1, 256, 512), (1, 8, 16))
    report = verify(
        [fam], target=INTERP, bench_for=lambda op: bench, served_config=served_by_m, min_ratio=0.98
    )
    failing = report.failing()
    assert [r.M for r in failing] == [16, 8]  # worst first: the failed call has ratio 0
    assert failing[0].ratio == 0.0 and failing[0].status.startswith("served: wrong_result")
    assert failing[1].ratio == pytest.approx(10 / 12)
    assert not report.ok
    data = json.loads(report.to_json())
    assert data["ok"] is False and len(data["rows"]) == 3 and data["summary"][-1]["under"] == 2


def test_no_vendor_rows_are_not_compared() -> None:
    class NoVendor:
        name = "gemm"

        def space(self, problem: Problem, target: Target) -> object:
            return GEMM.space(problem, target, ("triton",))

    fam = Family(NoVendor(), Problem.of("gemm", 1, 256, 512), (1, 2))  # type: ignore[arg-type]
    bench = FakeBench(served_us=lambda m: 1.0, vendor_us=lambda m: 1.0)
    report = verify([fam], target=INTERP, bench_for=lambda op: bench, served_config=served_by_m)
    assert [r.status for r in report.rows] == ["no vendor", "no vendor"] and report.ok and not bench.runs


def test_vendor_config_and_family_of_entry() -> None:
    assert vendor_config(GEMM, Problem.of("gemm", 4, 256, 512), INTERP) == VENDOR
    entry = Entry("gemm", "bf16", "kn", 256, 512, ranges=(Range(1, None, VENDOR),))
    assert family_of_entry(entry) == Problem.of("gemm", 1, 256, 512, "bf16", layout="kn")
    quant = Entry("gemm_fp8_rowwise", "fp8e4m3", "nk", 256, 512, ranges=(Range(1, None, VENDOR),))
    assert family_of_entry(quant) == Problem.quant("gemm_fp8_rowwise", 1, 256, 512, "bf16", "fp8e4m3")


def _table(path: Path) -> Path:
    entry = Entry("gemm", "bf16", "nk", 256, 512, ranges=(Range(1, 16, OURS), Range(17, None, VENDOR)))
    Table(target=INTERP, entries=[entry]).save(path)
    return path


@pytest.mark.parametrize("served_us, code", [(8.0, 0), (12.0, 1)])
def test_cli_exit_code_json_and_worst_rows(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    served_us: float,
    code: int,
) -> None:
    import autotune.sweeps.verify
    from autotune.cli import main

    bench = FakeBench(served_us=lambda m: served_us, vendor_us=lambda m: 10.0)
    monkeypatch.setattr(autotune.sweeps.verify, "_default_bench", lambda target: lambda op: bench)
    out = tmp_path / "v.json"
    argv = [
        "verify",
        str(_table(tmp_path / "t.json")),
        "--interpret",
        "--m",
        "1,8,16,17,64",
        "--out",
        str(out),
    ]
    assert main([*argv, "--no-progress"]) == code
    text = capsys.readouterr().out
    assert "worst" in text and "gemm N=256 K=512 bf16" in text
    data = json.loads(out.read_text())
    assert [r["M"] for r in data["rows"]] == [1, 8, 16, 17, 64]
    # the table's ranges are what the entry point served: ours up to 16, the vendor's call above
    assert [r["status"] for r in data["rows"]] == ["timed"] * 3 + ["vendor"] * 2
    assert data["ok"] is (code == 0)
    assert ("FAIL: 3 rows under 0.98" in text) is (code == 1)


def test_cli_refuses_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from autotune.cli import main

    assert main(["verify", "--interpret"]) == 2
    assert "give a TABLE.json" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "missing.json"), "--interpret"]) == 2
    assert "does not exist" in capsys.readouterr().err
    table = _table(tmp_path / "t.json")
    assert main(["verify", str(table), "--interpret", "--m", "1,x"]) == 2
    assert "--m: bad M ladder item" in capsys.readouterr().err
    other = Table(target=Target.for_arch("sm_90"), entries=Table.load(table).entries)
    other.save(tmp_path / "h100.json")
    assert main(["verify", str(tmp_path / "h100.json"), "--interpret"]) == 2
    assert "verify it on that GPU" in capsys.readouterr().err


MOE_FAMILY = Problem.of("moe", 1, 64, 128, E=8, topk=2)


def test_a_moe_is_compared_with_what_vllm_runs_not_with_its_per_expert_loop() -> None:
    """The MoE's "torch" backend is a baseline loop the entry point never serves: no vendor. Its rows are
    compared with vLLM's fallback rule at each M instead (the rule steps at M = E): a row served that
    config is the baseline's own call, others are timed against it."""
    from autotune.kernels import MOE
    from autotune.kernels.moe.formats.vllm import fallback_at

    assert vendor_config(MOE, MOE_FAMILY.with_m(4), INTERP) is None
    small, large = fallback_at(MOE_FAMILY, INTERP, 4), fallback_at(MOE_FAMILY, INTERP, 64)
    assert small is not None and large is not None and small != large
    ours = Config(backend="triton", BLOCK_SIZE_M=16, BLOCK_SIZE_N=32, BLOCK_SIZE_K=32, GATE_UP_FUSED=1)

    def served(op: object, problem: Problem, target: Target) -> Config:
        return small if problem.M <= 8 else ours

    bench = FakeBench(served_us=lambda m: 9.0, vendor_us=lambda m: 10.0)
    report = verify(
        [Family(MOE, MOE_FAMILY, (1, 8, 9, 64))],
        target=INTERP,
        bench_for=lambda op: bench,
        served_config=served,
    )
    by_m = {r.M: r for r in report.rows}
    assert [by_m[m].status for m in (1, 8)] == ["vendor", "vendor"] and by_m[1].vendor == small.to_dict()
    assert (
        by_m[9].status == "timed"
        and by_m[9].vendor == large.to_dict()
        and by_m[9].ratio == pytest.approx(10 / 9)
    )
    assert {c for _, c, _ in bench.runs} == {SERVED, large}  # never the per-expert loop
    assert report.ok


def test_the_deployment_baseline_is_the_devices_file_else_the_fallback(tmp_path: Path) -> None:
    from dataclasses import replace

    from autotune.db import Store, import_files
    from autotune.kernels.moe.formats.vllm import fallback_configs
    from autotune.sweeps.verify import deployment_baseline

    h100 = Target.for_arch("sm_90")
    keys = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
    vllm = tmp_path / "E=8,N=64,device_name=NVIDIA_H100_80GB_HBM3.json"
    rows = {"1": (16, 32, 64, 1, 4, 5), "64": (64, 64, 64, 8, 4, 3)}
    vllm.write_text(json.dumps({m: dict(zip(keys, v, strict=True)) for m, v in rows.items()}))
    ladder = (1, 8, 64, 512)
    with Store(str(tmp_path / "b.db")) as store:
        import_files(store, [vllm], k=128, topk=2)
        pick, source = deployment_baseline(MOE_FAMILY, h100, ladder, store)
        assert source == "file" and pick is not None
        assert pick(2)["num_stages"] == 5 and pick(40)["BLOCK_SIZE_M"] == 64 and pick(4096)["num_stages"] == 3
        h200 = replace(h100, name="NVIDIA H200")  # an H100's file does not speak for an H200
        pick, source = deployment_baseline(MOE_FAMILY, h200, ladder, store)
        want = fallback_configs(MOE_FAMILY, h200, ladder)
        assert source == "vLLM fallback" and pick is not None and pick(512) == want[512]
    mxfp4 = Problem.of("moe", 1, 2880, 2880, variant="fp4e2m1", E=32, topk=4)
    assert deployment_baseline(mxfp4, h100, ladder) == (None, "")


def test_cli_verifies_a_moe_spec_against_vllms_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import autotune.sweeps.verify
    from autotune.cli import main

    bench = FakeBench(served_us=lambda m: 9.0, vendor_us=lambda m: 10.0)
    monkeypatch.setattr(autotune.sweeps.verify, "_default_bench", lambda target: lambda op: bench)
    monkeypatch.chdir(tmp_path)  # no ./autotune.db: the fallback rule
    spec = tmp_path / "moe.toml"
    spec.write_text('name = "m"\n[[sweep]]\nop = "moe"\ne = 8\ntopk = 2\nnk = [[64, 128]]\nm = [1, 16]\n')
    argv = [
        "verify",
        "--problems",
        str(spec),
        "--interpret",
        "--m",
        "1,16",
        "--out",
        "v.json",
        "--no-progress",
    ]
    assert main(argv) == 0
    assert "compared with vLLM fallback" in capsys.readouterr().out
    data = json.loads((tmp_path / "v.json").read_text())
    assert [r["status"] for r in data["rows"]] == ["timed", "timed"]
    assert all(r["vendor"]["GATE_UP_FUSED"] == 0 and r["vendor"]["backend"] == "triton" for r in data["rows"])
    assert not (tmp_path / "autotune.db").exists()  # verify made no database
    # a database that holds no file for this GPU (here, where it is found by default): the rule still
    from autotune.db import Store

    Store(str(tmp_path / "autotune.db")).close()
    assert main(argv) == 0
    assert "compared with vLLM fallback" in capsys.readouterr().out
    assert main([*argv, "--db", str(tmp_path / "missing.db")]) == 2  # a named database must exist
    assert "no database at" in capsys.readouterr().err


def test_a_moe_config_is_timed_through_the_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    """The baseline pays what the served call pays besides its kernels (the block alignment on every call):
    both run `fused_moe`, the baseline's forced to its config. Other ops' entry points take no config."""
    import torch

    import autotune.kernels.moe.api as moe_api
    import autotune.kernels.served as served
    from autotune.kernels import MOE
    from autotune.kernels.moe.formats.vllm import fallback_at
    from autotune.sweeps.verify import EntryPoint

    calls: list[object] = []
    monkeypatch.setattr(moe_api, "fused_moe", lambda *args, **kw: calls.append(kw["config"]))
    problem = MOE_FAMILY.with_m(4)
    inputs = MOE.make_inputs(problem, "cpu", seed=3)
    out = torch.empty(4, 128, dtype=torch.bfloat16)
    baseline = fallback_at(MOE_FAMILY, INTERP, 4)
    EntryPoint(MOE).prepare(problem, baseline, INTERP, inputs, out)()
    EntryPoint(MOE).prepare(problem, SERVED, INTERP, inputs, out)()
    assert calls == [baseline, None]
    gemm_inputs = GEMM.make_inputs(Problem.of("gemm", 4, 256, 512), "cpu", seed=3)
    with pytest.raises(ValueError, match="gemm takes no config"):
        served.served_launch(GEMM, Problem.of("gemm", 4, 256, 512), INTERP, gemm_inputs, out, VENDOR)
