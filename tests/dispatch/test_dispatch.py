"""Tests of autotune.dispatch: the pinned Table, the Dispatcher guard and the untuned-shapes log (CPU)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import autotune.dispatch.dispatcher as dispatcher_mod
from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.target import Target
from autotune.dispatch import (
    M_POLICIES,
    Bucket,
    Dispatcher,
    Entry,
    Table,
    TableError,
    UntunedShapeWarning,
    default_dispatcher,
    install_dispatcher,
    load_tables,
    lookup,
    read_untuned_log,
)
from autotune.dispatch.table import pick

REPO = Path(__file__).resolve().parents[2]
MS = (1, 16, 64, 256)


def cfg(m: int, **extra: int | str) -> Config:
    """A config labelled by the bucket it belongs to."""
    return Config(backend="triton", BLOCK_M=16, BLOCK_N=64, tag=m, **extra)


@pytest.fixture
def interp() -> Target:
    return Target.interpreter_target()


@pytest.fixture
def h100() -> Target:
    return Target.for_arch("sm_90")


def hand_table(target: Target, m_policy: str = "round_up", n: int = 4096, k: int = 4096) -> Table:
    entry = Entry("gemm", "bf16", "nk", n, k, tuple(Bucket(m, cfg(m), float(m)) for m in MS))
    return Table(target=target, entries=[entry], m_policy=m_policy)


def winners(seed: int = 0) -> list[tuple[Problem, Config, float | None]]:
    out: list[tuple[Problem, Config, float | None]] = []
    for n, k in ((4096, 4096), (1024, 8192)):
        for m in (1, 8, 64, 512):
            out.append((Problem.of("gemm", m, n, k), cfg(m, seed=seed, N=n), 3.5 * m))
    out.append((Problem.of("gemm", 32, 4096, 4096, "fp16", layout="kn"), cfg(32, seed=seed), None))
    moe = Problem.of("moe", 16, 1408, 2048, E=64, topk=6)
    out.append((moe, cfg(16, seed=seed, moe=1), 7.0))
    return out


def runtime_warnings(record: list[warnings.WarningMessage]) -> list[warnings.WarningMessage]:
    return [w for w in record if issubclass(w.category, RuntimeWarning)]


# -- Table --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "M, expected",
    [
        # M: round_up, round_down, nearest, nearest_log
        (1, (1, 1, 1, 1)),
        (3, (16, 1, 1, 1)),  # log: 3² = 9 < 1·16
        (4, (16, 1, 1, 16)),  # log tie: 4² = 1·16 -> up
        (10, (16, 1, 16, 16)),
        (20, (64, 16, 16, 16)),
        (32, (64, 16, 16, 64)),  # log tie: 32² = 16·64 -> up
        (40, (64, 16, 64, 64)),  # linear tie: |40-16| = |64-40| -> up
        (64, (64, 64, 64, 64)),
        (100, (256, 64, 64, 64)),  # log: 100² = 10000 < 64·256 = 16384
        (160, (256, 64, 256, 256)),  # linear tie: |160-64| = |256-160| -> up
        (1000, (256, 256, 256, 256)),
    ],
)
def test_m_policies_on_hand_made_buckets(interp: Target, M: int, expected: tuple[int, ...]) -> None:
    for policy, want in zip(M_POLICIES, expected, strict=True):
        table = hand_table(interp, policy)
        assert table.lookup("gemm", M, 4096, 4096) == cfg(want), (policy, M)
        bucket = table.lookup_bucket("gemm", M, 4096, 4096)
        assert bucket is not None and bucket.m == want and bucket.time_us == float(want)
        # a per-call override gives the same answer from a table with another default policy
        other = hand_table(interp, "round_down" if policy != "round_down" else "round_up")
        assert other.lookup("gemm", M, 4096, 4096, m_policy=policy) == cfg(want)
        # and the dispatcher serves the table's own policy
        d = Dispatcher([table], device_key=interp.device_key())
        assert d.lookup("gemm", M, 4096, 4096) == cfg(want)


def test_pick_agrees_with_brute_force() -> None:
    ms = (1, 3, 16, 24, 64, 100, 256, 1000)
    for M in range(1, 1500):
        up = [m for m in ms if m >= M]
        down = [m for m in ms if m <= M]
        assert ms[pick(ms, M, "round_up")] == (min(up) if up else ms[-1])
        assert ms[pick(ms, M, "round_down")] == (max(down) if down else ms[0])
        # nearest, ties up: smallest distance, then the larger m
        assert ms[pick(ms, M, "nearest")] == min(ms, key=lambda m: (abs(M - m), -m))
        # nearest_log: |log2 M - log2 m| <=> max(M, m) / min(M, m), compared exactly as fractions
        best = min(ms, key=lambda m: (max(M, m) * 10**9 // min(M, m), -m))
        i = pick(ms, M, "nearest_log")
        if best != ms[i]:  # only possible where the integer-division proxy ties; then it must be the tie
            lo, hi = sorted((best, ms[i]))
            assert lo * hi == M * M and ms[i] == hi
    with pytest.raises(ValueError, match="unknown m_policy"):
        pick(ms, 5, "closest")


def test_round_trip_from_winners_save_load(tmp_path: Path, interp: Target) -> None:
    ws = winners()
    table = Table.from_winners(interp, ws, m_policy="nearest", predicted=True)
    assert len(table) == len(ws)
    assert len(table.keys()) == 4
    path = tmp_path / "sub" / "table.json"
    table.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["table.json"]  # no temporary left behind
    loaded = Table.load(path)
    assert loaded.entries == table.entries
    assert loaded.keys() == table.keys()
    assert loaded.target == interp and loaded.target.toolchain == interp.toolchain
    assert (loaded.fingerprint, loaded.device_key) == (interp.fingerprint(), interp.device_key())
    assert (loaded.m_policy, loaded.predicted, loaded.created) == ("nearest", True, table.created)
    assert loaded.source == str(path) and loaded.generator.startswith("autotune")
    for problem, config, time_us in ws:
        args = (problem.op, problem.M, problem.N, problem.K)
        kw: dict[str, Any] = dict(dtype=problem.dtype, layout=problem.layout, params=problem.table_params)
        assert loaded.lookup(*args, **kw) == config == table.lookup(*args, **kw)
        bucket = loaded.lookup_bucket(*args, **kw)
        assert bucket is not None and bucket.m == problem.M and bucket.time_us == time_us
    data = json.loads(path.read_text())
    assert data["format"] == "autotune-table" and data["version"] == 3  # the moe's params: E and topk
    assert [e.get("params", "") for e in data["entries"]][-1] == "E=64,topk=6"
    assert not any("e" in e or "topk" in e for e in data["entries"])
    assert data["entries"][0]["buckets"][0]["config"]["backend"] == "triton"
    # the text form is stable: saving what was loaded gives the same entries and header
    assert json.loads(loaded.to_json())["entries"] == data["entries"]


def test_moe_weights_dtypes_are_three_families(tmp_path: Path, interp: Target) -> None:
    """bf16, FP8 and MXFP4 weights of one MoE shape: three entries (`b=` in their params), kept apart
    through a save and load, each served to its own calls; a table built before `b=` (an FP8 entry keyed
    as bf16) serves no FP8 call."""
    from autotune.kernels import MOE
    from autotune.kernels.serve import served_config
    from autotune.sweeps.verify import family_of_entry

    shape = dict(M=64, N=768, K=2048, E=128, topk=8)
    problems = [Problem.of("moe", variant=w, **shape) for w in (None, "fp8e4m3", "mxfp4")]  # type: ignore[arg-type]
    configs = [Config(backend="triton", BLOCK_SIZE_M=m) for m in (16, 32, 64)]
    table = Table.from_winners(interp, [(p, c, 1.0) for p, c in zip(problems, configs, strict=True)])
    own = "E=128,topk=8"
    assert sorted(e.params for e in table.entries) == [own, f"{own},b=fp4e2m1", f"{own},b=fp8e4m3"]
    table.save(tmp_path / "t.json")
    loaded = Table.load(tmp_path / "t.json")
    assert {family_of_entry(e).dtype_b for e in loaded.entries} == {"bf16", "fp8e4m3", "fp4e2m1"}
    old = Table(
        target=interp,
        entries=[replace(e, params=own) for e in loaded.entries if e.params == f"{own},b=fp8e4m3"],
    )
    previous = install_dispatcher(Dispatcher([loaded], device_key=interp, untuned_log=os.devnull))
    try:
        for problem, config in zip(problems, configs, strict=True):
            assert served_config(MOE, problem, interp) == config
        install_dispatcher(Dispatcher([old], device_key=interp, untuned_log=os.devnull))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UntunedShapeWarning)
            assert served_config(MOE, problems[1], interp) == MOE.fallback_config(problems[1], interp)
    finally:
        install_dispatcher(previous)


def test_unknown_key_returns_none(interp: Target) -> None:
    table = Table.from_winners(interp, winners())
    assert table.lookup("gemm", 8, 4096, 4096) == cfg(8, seed=0, N=4096)
    assert table.lookup("gemm", 8, 4096, 4097) is None  # another K
    assert table.lookup("gemm", 8, 2048, 4096) is None  # another N
    assert table.lookup("gemm", 8, 4096, 4096, dtype="fp16") is None  # tuned only for kn
    assert table.lookup("gemm", 8, 4096, 4096, layout="kn") is None  # tuned only for fp16
    assert table.lookup("gemm", 8, 4096, 4096, params="E=8") is None  # own parameters it has not
    assert table.lookup("moe", 16, 1408, 2048, params="E=64,topk=2") is None  # another topk
    assert table.lookup("moe", 16, 1408, 2048, params="E=64,topk=6") == cfg(16, seed=0, moe=1)
    assert table.lookup("moe", 16, 1408, 2048) is None  # no params
    assert table.lookup("moe", 8, 4096, 4096) is None
    assert table.lookup_bucket("gemm", 8, 4096, 4097) is None


def test_dtype_aliases_are_accepted(interp: Target) -> None:
    torch = pytest.importorskip("torch")
    bucket = Bucket(1, {"BLOCK_M": 16})  # type: ignore[arg-type]  # a plain mapping is converted
    entry = Entry("gemm", "bfloat16", "nk", 64, 64, (bucket,))
    assert entry.dtype == "bf16" and entry.buckets[0].config == Config(BLOCK_M=16)
    table = Table(target=interp, entries=[entry])
    assert table.keys() == (("gemm", "bf16", "nk", 64, 64, ""),)
    for alias in ("bf16", "bfloat16", "torch.bfloat16", torch.bfloat16):
        assert table.lookup("gemm", 1, 64, 64, dtype=alias) == Config(BLOCK_M=16)
    d = Dispatcher([table], device_key=interp.device_key())
    assert d.lookup("gemm", 1, 64, 64, dtype=torch.bfloat16) == Config(BLOCK_M=16)


def test_invalid_tables_are_refused(interp: Target) -> None:
    with pytest.raises(ValueError, match="unknown m_policy"):
        hand_table(interp, "closest")
    with pytest.raises(ValueError, match="two winners"):
        Table.from_winners(interp, [(Problem.of("gemm", 1, 64, 64), cfg(1), 1.0)] * 2)
    with pytest.raises(ValueError, match="two buckets for m=4"):
        Entry("gemm", "bf16", "nk", 64, 64, (Bucket(4, cfg(4)), Bucket(4, cfg(5))))
    with pytest.raises(ValueError, match="needs buckets or ranges"):
        Entry("gemm", "bf16", "nk", 64, 64, ())
    with pytest.raises(ValueError, match="two entries"):
        Table(target=interp, entries=[*hand_table(interp).entries, *hand_table(interp).entries])
    with pytest.raises(ValueError, match="time_us"):
        Bucket(1, cfg(1), float("nan"))
    with pytest.raises(ValueError, match="unknown m_policy"):
        hand_table(interp).lookup("gemm", 1, 4096, 4096, m_policy="closest")
    with pytest.raises(AttributeError, match="immutable"):
        hand_table(interp).m_policy = "nearest"


def _valid_dict(target: Target) -> dict[str, Any]:
    return json.loads(hand_table(target).to_json())


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"hello": "world"}', r"is not an autotune table \(expected a JSON object"),
        (b"[1, 2, 3]", r"is not an autotune table .*got list"),
        (b"\xff\xfe\x00\x13garbage", r"is not an autotune table: not UTF-8"),
        (b"{not json at all", r"is not an autotune table: not valid JSON"),
        (
            "version",
            r"unsupported table version 4 \(this autotune reads versions 1, 2, 3\); upgrade autotune",
        ),
        (
            "bad_m",
            r"malformed table: entries\[0\]\.buckets\[1\] \(op=gemm .*n=4096.*\): m must be a positive",
        ),
        ("no_n", r"malformed table: entries\[0\] .* lacks 'n'"),
        ("edited", r"malformed table: 'device_key' .* does not match its target"),
        ("policy", r"'m_policy' must be one of"),
    ],
)
def test_not_our_file_raises_table_error(
    tmp_path: Path, interp: Target, content: bytes | str, message: str
) -> None:
    path = tmp_path / "t.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        data = _valid_dict(interp)
        entry = data["entries"][0]
        if content == "version":
            data["version"] = 4
        elif content == "bad_m":
            entry["buckets"][1]["m"] = -1
        elif content == "no_n":
            del entry["n"]
        elif content == "edited":
            data["target"]["name"] = "Some Other GPU"
        elif content == "policy":
            data["m_policy"] = "closest"
        path.write_text(json.dumps(data))
    with pytest.raises(TableError, match=message) as info:
        Table.load(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_missing_file_raises_table_error(tmp_path: Path) -> None:
    with pytest.raises(TableError, match="does not exist"):
        Table.load(tmp_path / "nope.json")
    with pytest.raises(TableError, match="is a directory"):
        Table.load(tmp_path)


# -- Dispatcher: the guard ----------------------------------------------------------------------------


def test_guard_refuses_another_gpu_with_one_warning(tmp_path: Path, h100: Target) -> None:
    h200 = replace(h100, name="NVIDIA H200")
    assert h200.device_key() != h100.device_key()
    d = Dispatcher(device_key=h200, untuned_log=tmp_path / "u.jsonl")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert d.add(hand_table(h100)) is False
        results = [d.lookup("gemm", M, 4096, 4096) for M in (1, 16, 100, 1, 16)]
    assert results == [None] * 5
    assert d.tables == ()
    (warning,) = runtime_warnings(record)
    text = str(warning.message)
    assert "NVIDIA H100 80GB HBM3 (sm_90, 132 CUs)" in text and "NVIDIA H200 (sm_90, 132 CUs)" in text
    assert "run the fallback" in text and "not used" in text
    assert warning.filename == __file__  # points at the caller of add()


def test_guard_with_a_device_key_string(tmp_path: Path, interp: Target, h100: Target) -> None:
    d = Dispatcher([hand_table(interp)], device_key=interp.device_key(), untuned_log=tmp_path / "u.jsonl")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert d.add(hand_table(h100, n=1024)) is False
    (warning,) = runtime_warnings(record)
    assert "sm_90" in str(warning.message) and interp.device_key() in str(warning.message)
    assert d.lookup("gemm", 20, 4096, 4096) == cfg(64)  # the interpreter table is still used
    assert d.device_key == interp.device_key()


def test_same_gpu_other_toolchain_is_used(
    tmp_path: Path, h100: Target, caplog: pytest.LogCaptureFixture
) -> None:
    old = replace(h100, toolchain={"torch": "2.4.0", "triton": "3.0.0", "cuda": "12.1"})
    assert old.fingerprint() != h100.fingerprint() and old.device_key() == h100.device_key()
    d = Dispatcher(device_key=h100, untuned_log=tmp_path / "u.jsonl")
    caplog.set_level(logging.INFO, logger="autotune.dispatch")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        assert d.add(hand_table(old)) is True
    assert d.lookup("gemm", 20, 4096, 4096) == cfg(64)
    assert any(
        "another toolchain" in r.getMessage() and "triton 3.0.0" in r.getMessage() for r in caplog.records
    )


def test_no_gpu_uses_only_interpreter_tables(tmp_path: Path, interp: Target, h100: Target) -> None:
    d = Dispatcher(device_key=lambda: None, untuned_log=tmp_path / "u.jsonl")
    assert d.add(hand_table(interp)) is True
    with pytest.warns(RuntimeWarning, match="no GPU is visible"):
        assert d.add(hand_table(h100, n=1024)) is False
    assert d.device_key is None
    assert d.lookup("gemm", 1, 4096, 4096) == cfg(1)


def test_later_table_wins(tmp_path: Path, interp: Target) -> None:
    first = Table.from_winners(interp, winners(seed=1))
    second = Table.from_winners(
        interp, [(Problem.of("gemm", m, 4096, 4096), cfg(m, seed=2), None) for m in (1, 64)]
    )
    d = Dispatcher([first, second], device_key=interp.device_key(), untuned_log=tmp_path / "u.jsonl")
    assert d.tables == (first, second)
    assert d.lookup("gemm", 64, 4096, 4096) == cfg(64, seed=2)
    assert d.lookup("gemm", 512, 4096, 4096) == cfg(64, seed=2)  # the second's buckets, not a merge
    assert d.lookup("gemm", 8, 1024, 8192) == cfg(8, seed=1, N=1024)  # only in the first
    assert d.set_tables([second, first]) == 2
    assert d.lookup("gemm", 64, 4096, 4096) == cfg(64, seed=1, N=4096)


def test_tuned_path_is_quiet_and_fast(
    tmp_path: Path, interp: Target, caplog: pytest.LogCaptureFixture
) -> None:
    d = Dispatcher(
        [Table.from_winners(interp, winners())],
        device_key=interp.device_key(),
        untuned_log=tmp_path / "u.jsonl",
    )
    caplog.set_level(logging.DEBUG)
    n = 20000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        start = time.perf_counter()
        for _ in range(n):
            d.lookup("gemm", 100, 4096, 4096)
        per_call = (time.perf_counter() - start) / n
    assert caplog.records == []
    assert not (tmp_path / "u.jsonl").exists()
    assert per_call < 5e-6, f"{per_call * 1e9:.0f} ns per lookup"  # well under 1 µs on a normal host


# -- untuned shapes -----------------------------------------------------------------------------------


def test_untuned_warns_once_per_shape_and_logs_each_m(tmp_path: Path, interp: Target) -> None:
    log = tmp_path / "deep" / "untuned.jsonl"
    d = Dispatcher([hand_table(interp)], device_key=interp.device_key(), untuned_log=log)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for M in (1, 1, 5, 5, 7, 1):
            assert d.lookup("gemm", M, 512, 512) is None
        assert d.lookup("moe", 3, 512, 512, params="E=8,topk=2", dtype="fp16") is None
        assert d.lookup("gemm", 3, 4096, 4096) == cfg(16)  # tuned: no warning, no log
        d.note_untuned("gemm", 9, 512, 512, "bf16", "nk")
    untuned = [w for w in record if issubclass(w.category, UntunedShapeWarning)]
    assert len(untuned) == 2 == len(record)
    text = str(untuned[0].message)
    assert "gemm bf16 B:nk N=512 K=512" in text and "M=1" in text
    assert "run `autotune sweep`" in text.lower() and str(log) in text
    assert "moe fp16 B:nk N=512 K=512 E=8,topk=2" in str(untuned[1].message)
    assert untuned[0].filename == __file__
    lines = log.read_text().splitlines()
    assert len(lines) == 5  # (512, M) for M in 1, 5, 7, 9 and the MoE shape at M=3
    records = read_untuned_log(log)
    assert [(r["n"], r["m"]) for r in records] == [(512, 1), (512, 5), (512, 7), (512, 3), (512, 9)]
    first = records[0]
    assert set(first) == {"op", "m", "n", "k", "dtype", "layout", "device_key", "time"}
    assert (first["op"], first["k"]) == ("gemm", 512)
    assert (first["dtype"], first["layout"], first["device_key"]) == ("bf16", "nk", interp.device_key())
    assert (
        records[3]["params"] == "E=8,topk=2" and records[3]["op"] == "moe" and records[3]["dtype"] == "fp16"
    )


def test_read_untuned_log_dedupes_and_skips_corrupt_lines(
    tmp_path: Path, interp: Target, caplog: pytest.LogCaptureFixture
) -> None:
    log = tmp_path / "u.jsonl"
    for _ in range(2):  # two processes log the same shapes
        d = Dispatcher(device_key=interp.device_key(), untuned_log=log)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            d.lookup("gemm", 4, 256, 256)
            d.lookup("gemm", 8, 256, 256)
    with log.open("a") as f:
        f.write("\n   \n{truncated\n[1, 2]\n")
    assert len(log.read_text().splitlines()) == 8
    with caplog.at_level(logging.WARNING, logger="autotune.dispatch"):
        records = read_untuned_log(log)
    assert [r["m"] for r in records] == [4, 8]
    assert sum("corrupt line" in r.getMessage() for r in caplog.records) == 2
    assert read_untuned_log(tmp_path / "missing.jsonl") == []


def test_untuned_log_from_env(tmp_path: Path, interp: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "env" / "log.jsonl"
    monkeypatch.setenv("AUTOTUNE_UNTUNED_LOG", str(log))
    d = Dispatcher(device_key=interp.device_key())
    assert d.untuned_log_path == log
    with pytest.warns(UntunedShapeWarning, match=str(log)):
        d.lookup("gemm", 2, 128, 128)
    assert read_untuned_log()[0]["m"] == 2


def test_unwritable_log_never_raises(
    tmp_path: Path, interp: Target, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    d = Dispatcher(device_key=interp.device_key(), untuned_log=blocker / "u.jsonl")
    with caplog.at_level(logging.WARNING, logger="autotune.dispatch"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert d.lookup("gemm", 1, 128, 128) is None
        assert d.lookup("gemm", 2, 128, 128) is None
        assert d.lookup("gemm", 2, 256, 128) is None
    failures = [r for r in caplog.records if "cannot write the untuned-shapes log" in r.getMessage()]
    assert len(failures) == 1


# -- the default dispatcher and $AUTOTUNE_TABLES --------------------------------------------------------


@pytest.fixture
def fresh_default(tmp_path: Path, interp: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process-wide dispatcher built anew, on a machine whose "GPU" is the interpreter."""
    monkeypatch.setattr(dispatcher_mod, "_default", None)
    monkeypatch.setattr(dispatcher_mod, "_detect_local_target", lambda: interp)
    monkeypatch.setenv("AUTOTUNE_UNTUNED_LOG", str(tmp_path / "untuned.jsonl"))
    monkeypatch.delenv("AUTOTUNE_TABLES", raising=False)


def _two_tables(folder: Path, interp: Target) -> None:
    folder.mkdir()
    Table.from_winners(interp, winners(seed=1)).save(folder / "a.json")
    late = [(Problem.of("gemm", m, 4096, 4096), cfg(m, seed=2), None) for m in (1, 64)]
    late.append((Problem.of("gemm", 16, 777, 4096), cfg(16, seed=2), None))
    Table.from_winners(interp, late).save(folder / "b.json")
    (folder / "notes.txt").write_text("not a table, not *.json")


@pytest.mark.usefixtures("fresh_default")
def test_env_tables_directory(tmp_path: Path, interp: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "tables"
    _two_tables(folder, interp)
    monkeypatch.setenv("AUTOTUNE_TABLES", str(folder))
    assert lookup("gemm", 16, 777, 4096) == cfg(16, seed=2)  # from b.json
    assert lookup("gemm", 8, 1024, 8192) == cfg(8, seed=1, N=1024)  # from a.json
    assert lookup("gemm", 30, 4096, 4096) == cfg(64, seed=2)  # both: b.json is later and wins
    d = default_dispatcher()
    assert d is default_dispatcher() and [Path(t.source).name for t in d.tables] == ["a.json", "b.json"]
    with pytest.warns(UntunedShapeWarning):
        assert lookup("gemm", 8, 999, 999) is None


@pytest.mark.usefixtures("fresh_default")
def test_env_tables_path_list_and_load_tables(
    tmp_path: Path, interp: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "tables"
    _two_tables(folder, interp)
    monkeypatch.setenv(
        "AUTOTUNE_TABLES", os.pathsep.join([str(folder / "b.json"), "", str(folder / "a.json")])
    )
    d = load_tables()
    assert d is default_dispatcher()
    assert lookup("gemm", 30, 4096, 4096) == cfg(64, seed=1, N=4096)  # a.json listed last wins
    assert load_tables(folder / "b.json") is d and len(d.tables) == 1
    with pytest.warns(UntunedShapeWarning, match="N=1024 K=8192") as record:
        assert lookup("gemm", 8, 1024, 8192) is None
    assert record[0].filename == __file__
    with pytest.raises(TableError, match="does not exist"):
        load_tables(tmp_path / "missing")
    (folder / "c.json").write_text('{"E=8,N=128": {"1": {"BLOCK_SIZE_M": 16}}}')  # a vLLM config
    with pytest.raises(TableError, match=r"c\.json is not an autotune table"):
        load_tables(folder)
    assert [Path(t.source).name for t in d.tables] == ["b.json"]  # unchanged after the failure


@pytest.mark.usefixtures("fresh_default")
def test_default_dispatcher_skips_bad_env_entries(
    tmp_path: Path, interp: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tmp_path / "good.json"
    hand_table(interp).save(good)
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    monkeypatch.setenv("AUTOTUNE_TABLES", os.pathsep.join([str(tmp_path / "gone"), str(bad), str(good)]))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert lookup("gemm", 20, 4096, 4096) == cfg(64)
    messages = [str(w.message) for w in runtime_warnings(record)]
    assert len(messages) == 2
    assert "does not exist" in messages[0] and "is not an autotune table" in messages[1]
    with (
        pytest.warns(RuntimeWarning, match="does not exist"),
        pytest.raises(TableError, match="not an autotune"),
    ):
        load_tables()  # the explicit call reports the bad file


# -- import hygiene -----------------------------------------------------------------------------------


def test_import_does_not_pull_heavy_modules(tmp_path: Path, interp: Target) -> None:
    path = tmp_path / "t.json"
    hand_table(interp).save(path)
    code = (
        "import sys, autotune.dispatch as d\n"
        "heavy = {'sqlalchemy', 'optuna', 'pandas'}\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
        "t = d.Table.load(sys.argv[1])\n"
        "disp = d.Dispatcher([t], device_key=t.device_key)\n"
        "assert disp.lookup('gemm', 20, 4096, 4096)['tag'] == 64\n"
        "assert not heavy & set(sys.modules), heavy & set(sys.modules)\n"
        "print('torch' in sys.modules)\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"  # torch is only imported to detect the GPU, lazily
