"""Static features in the Store (round trip, idempotence, kernel versions, the table added to an older
version-1 database) and emitting tables where model predictions meet measurements."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.result import Source, Timing, TrialResult, TrialStatus
from autotune.core.static import StaticFeatures, StaticFinding
from autotune.core.target import Target
from autotune.db import SCHEMA_VERSION, Store, StoreError, resolve_url
from autotune.dispatch.emit import emit_table
from autotune.dispatch.table import Table

REPO = Path(__file__).resolve().parents[2]

ARCH = "gfx942"
TOOLCHAIN = {"triton": "3.6.0", "torch": "2.13.0", "hip": "7.0"}
NEWER = {**TOOLCHAIN, "triton": "3.7.0"}
KERNEL = ("gemm.triton", "src-v1")
KERNELS = {"triton": KERNEL}
PROBLEM = Problem.of("gemm", 16, 4096, 4096)


# -- fixtures (PostgreSQL ones: conftest.py) ----------------------------------------------------------


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store(str(tmp_path / "static.db")) as s:
        yield s


# -- helpers -------------------------------------------------------------------------------------------


def cfg(bm: int = 64, nonkdim: int = 16, backend: str = "triton") -> Config:
    if backend == "torch":
        return Config(backend="torch")
    return Config(
        backend=backend,
        BLOCK_M=bm,
        BLOCK_N=128,
        BLOCK_K=64,
        num_warps=4,
        num_stages=2,
        matrix_instr_nonkdim=nonkdim,
    )


def feats(vgprs: int = 128, spills: int = 0, arch: str = ARCH) -> StaticFeatures:
    return StaticFeatures(
        arch=arch,
        vgprs=vgprs,
        agprs=64,
        sgprs=40,
        spills=spills,
        scratch_bytes=4 * spills,
        lds_bytes=32768,
        occupancy=2,
        occupancy_unit="waves/SIMD",
        mma=("v_mfma_f32_16x16x16_bf16",),
        load_bits=(128, 64),
        store_bits=(64,),
        compile_s=1.25,
        toolchain=dict(TOOLCHAIN),
    )


def put_features(
    store: Store,
    config: Config,
    features: StaticFeatures,
    findings: tuple[tuple[str, str] | StaticFinding, ...] = (),
    *,
    toolchain: dict[str, str] = TOOLCHAIN,
    kernel: tuple[str, str] = KERNEL,
    problem: Problem = PROBLEM,
    arch: str = ARCH,
) -> bool:
    return store.record_features(
        arch=arch,
        toolchain=toolchain,
        kernel=kernel[0],
        source_hash=kernel[1],
        problem=problem,
        config=config,
        features=features,
        findings=findings,
    )


def read(store: Store, **kw: object) -> dict[str, tuple[StaticFeatures, list[tuple[str, str]]]]:
    args: dict[str, object] = dict(arch=ARCH, toolchain=TOOLCHAIN, problem=PROBLEM, kernels=KERNELS)
    args.update(kw)
    return store.features(**args)  # type: ignore[arg-type]


# -- static features in the Store ----------------------------------------------------------------------


def test_features_and_findings_round_trip(db_url: str) -> None:
    spilling = feats(vgprs=512, spills=17)
    broken = StaticFeatures.failed(ARCH, "error: LDS exceeds 64 KiB\nsecond line", compile_s=0.5)
    with Store(db_url) as store:
        assert put_features(store, cfg(64), feats()) is True
        assert put_features(
            store,
            cfg(128),
            spilling,
            (
                ("spills", "spills 17 register(s) to 68 B of scratch per lane"),
                StaticFinding("occupancy", "low"),
            ),
        )
        assert put_features(store, cfg(256), broken, (("compile", "does not compile for gfx942: LDS"),))

    with Store(db_url) as reopened:  # read by another Store: nothing lives only in a cache
        got = read(reopened, toolchain=dict(reversed(list(TOOLCHAIN.items()))))  # key order is irrelevant

    assert set(got) == {cfg(64).digest(), cfg(128).digest(), cfg(256).digest()}
    clean, no_findings = got[cfg(64).digest()]
    assert clean == feats() and clean.to_json() == feats().to_json()
    assert clean.mma == ("v_mfma_f32_16x16x16_bf16",) and clean.load_bits == (128, 64)
    assert clean.toolchain == TOOLCHAIN and no_findings == []
    back, findings = got[cfg(128).digest()]
    assert (back.vgprs, back.spills, back.scratch_bytes) == (512, 17, 68)
    assert findings == [("spills", "spills 17 register(s) to 68 B of scratch per lane"), ("occupancy", "low")]
    failed, why = got[cfg(256).digest()]
    assert failed.compiled is False and failed.error == "error: LDS exceeds 64 KiB\nsecond line"
    assert failed.compile_s == 0.5 and why == [("compile", "does not compile for gfx942: LDS")]
    # the key columns hold what the brief asks for
    engine = create_engine(resolve_url(db_url))
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT arch, toolchain, compiled, compile_s, findings_json FROM static_features ORDER BY id"
            )
        ).all()
    engine.dispose()
    assert [r[0] for r in rows] == [ARCH] * 3
    assert rows[0][1] == json.dumps(TOOLCHAIN, sort_keys=True)
    assert [bool(r[2]) for r in rows] == [True, True, False]
    assert [r[3] for r in rows] == [1.25, 1.25, 0.5]
    assert json.loads(rows[2][4]) == [["compile", "does not compile for gfx942: LDS"]]


def test_record_features_is_idempotent_on_its_key(store: Store) -> None:
    assert put_features(store, cfg(64), feats(vgprs=100)) is True
    assert put_features(store, cfg(64), feats(vgprs=100)) is False
    assert put_features(store, cfg(64), feats(vgprs=999), (("spills", "x"),)) is False  # the first stays
    [(kept, findings)] = read(store).values()
    assert kept.vgprs == 100 and findings == []

    # Each part of the key makes another row: toolchain, arch, problem, kernel version, config.
    assert put_features(store, cfg(64), feats(vgprs=101), toolchain=NEWER) is True
    assert put_features(store, cfg(64), feats(vgprs=102, arch="gfx950"), arch="gfx950") is True
    assert put_features(store, cfg(64), feats(vgprs=103), problem=Problem.of("gemm", 32, 4096, 4096)) is True
    assert put_features(store, cfg(64), feats(vgprs=104), kernel=("gemm.triton", "src-v2")) is True
    assert put_features(store, cfg(32), feats(vgprs=105)) is True
    assert put_features(store, cfg(64), feats(vgprs=101), toolchain=NEWER) is False

    assert {k: v[0].vgprs for k, v in read(store).items()} == {cfg(64).digest(): 100, cfg(32).digest(): 105}
    assert [v[0].vgprs for v in read(store, toolchain=NEWER).values()] == [101]
    assert [v[0].vgprs for v in read(store, arch="gfx950").values()] == [102]
    assert [v[0].vgprs for v in read(store, problem=Problem.of("gemm", 32, 4096, 4096)).values()] == [103]
    assert read(store, arch="sm_90") == {}
    assert read(store, toolchain={**TOOLCHAIN, "hip": "6.4"}) == {}


def test_the_instruction_mix_round_trips_and_rows_without_it_still_load(db_url: str) -> None:
    mixed = dataclasses.replace(feats(), mix=StaticFeatures.mix_of({"valu": 133, "mma": 32, "spill": 4}))
    with Store(db_url) as store:
        assert put_features(store, cfg(64), mixed) is True
        assert put_features(store, cfg(128), feats()) is True
    engine = create_engine(resolve_url(db_url))
    with engine.begin() as conn:  # a row written before the mix was read: its JSON has no "mix"
        where = {"h": cfg(128).digest()}
        stored = conn.execute(text("SELECT features_json FROM static_features WHERE config_hash = :h"), where)
        data = json.loads(stored.scalar_one())
        del data["mix"]
        conn.execute(text("UPDATE static_features SET features_json = :j WHERE config_hash = :h"),
                     {**where, "j": json.dumps(data)})  # fmt: skip
    engine.dispose()
    with Store(db_url) as store:
        got = read(store)
    back, _ = got[cfg(64).digest()]
    assert back == mixed and back.mix == (("valu", 133), ("mma", 32), ("spill", 4))
    assert back.valu_per_mma == pytest.approx(133 / 32)
    older, _ = got[cfg(128).digest()]
    assert older.mix == () and older.valu_per_mma is None and older.vgprs == feats().vgprs


def test_features_of_an_older_extraction_are_not_read(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """Features stored by an older way of reading binaries (FEATURES_VERSION) are compiled again."""
    import autotune.db.feature_cache as store_module

    monkeypatch.setattr(store_module, "FEATURES_VERSION", "1")
    assert put_features(store, cfg(64), feats(vgprs=100)) is True
    assert [v[0].vgprs for v in read(store).values()] == [100]
    monkeypatch.setattr(store_module, "FEATURES_VERSION", "2")
    assert read(store) == {}
    assert put_features(store, cfg(64), feats(vgprs=100, spills=3)) is True
    [(again, _)] = read(store).values()
    assert again.spills == 3 and again.toolchain == TOOLCHAIN


def test_features_count_only_the_given_kernel_versions(store: Store) -> None:
    put_features(store, cfg(64), feats(vgprs=1), kernel=("gemm.triton", "old"))
    put_features(store, cfg(128), feats(vgprs=2), kernel=("gemm.triton", "old"))
    put_features(store, cfg(64), feats(vgprs=3), kernel=("gemm.triton", "new"))
    put_features(store, cfg(backend="torch"), feats(vgprs=4), kernel=("gemm.torch", "v"))

    new = read(store, kernels={"triton": ("gemm.triton", "new")})
    assert {k: v[0].vgprs for k, v in new.items()} == {cfg(64).digest(): 3}
    old = read(store, kernels={"triton": ("gemm.triton", "old")})
    assert {k: v[0].vgprs for k, v in old.items()} == {cfg(64).digest(): 1, cfg(128).digest(): 2}
    both = read(store, kernels={"triton": ("gemm.triton", "new"), "torch": ("gemm.torch", "v")})
    assert sorted(v[0].vgprs for v in both.values()) == [3, 4]
    # a kernel version counts only for its own backend
    assert read(store, kernels={"torch": ("gemm.triton", "new")}) == {}
    assert read(store, kernels={"triton": ("gemm.triton", "newest")}) == {}
    assert read(store, kernels={}) == {}


def test_bad_features_are_refused_before_anything_is_written(store: Store) -> None:
    with pytest.raises(ValueError, match="arch 'gfx950' cannot be recorded for arch 'gfx942'"):
        put_features(store, cfg(64), feats(arch="gfx950"))
    with pytest.raises(ValueError, match="pair of strings"):
        put_features(store, cfg(64), feats(), (("spills",),))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pair of strings"):
        put_features(store, cfg(64), feats(), (("spills", 3),))  # type: ignore[arg-type]
    assert read(store) == {}
    assert put_features(store, cfg(64), feats()) is True


# -- an older version-1 database without the table -------------------------------------------------------


def test_a_version1_database_without_the_table_gets_it(db_url: str) -> None:
    with Store(db_url) as store:
        put_features(store, cfg(64), feats(vgprs=1))
        store.record(
            target=Target.for_arch(ARCH),
            kernel=KERNEL[0],
            source_hash=KERNEL[1],
            problem=PROBLEM,
            result=TrialResult(cfg(64), TrialStatus.COMPILE_ERROR, error="boom"),
        )
    engine = create_engine(resolve_url(db_url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE static_features"))
    assert "static_features" not in inspect(engine).get_table_names()

    with Store(db_url) as store:
        assert "static_features" in inspect(engine).get_table_names()
        assert read(store) == {}  # the dropped rows are gone, the table is there and empty
        assert put_features(store, cfg(64), feats(vgprs=7)) is True
        assert put_features(store, cfg(64), feats(vgprs=8)) is False  # its unique key is back too
        assert [v[0].vgprs for v in read(store).values()] == [7]
        assert [r.error for r in store.trials()] == ["boom"]  # nothing else was touched
        assert store.summary().schema_version == SCHEMA_VERSION  # the version is kept
    with engine.connect() as conn:
        assert conn.scalar(text("SELECT value FROM meta WHERE key = 'schema_version'")) == str(SCHEMA_VERSION)
    engine.dispose()


def test_concurrent_openers_add_the_table_once(db_url: str) -> None:
    Store(db_url).close()
    engine = create_engine(resolve_url(db_url))
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE static_features"))
    engine.dispose()
    script = """
import sys
from autotune.core.config import Config
from autotune.db import Store
from autotune.core.problem import Problem
from autotune.core.static import StaticFeatures
wins = 0
with Store(sys.argv[1]) as store:
    for bm in range(1, 21):
        wins += store.record_features(arch="gfx942", toolchain={"triton": "3.6.0"}, kernel="gemm.triton",
                                      source_hash="h", problem=Problem.of("gemm", 16, 64, 64),
                                      config=Config(backend="triton", BLOCK_M=bm),
                                      features=StaticFeatures(arch="gfx942", vgprs=bm))
print(wins)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, db_url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(3)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    assert sum(int(out) for out, _ in outs) == 20
    with Store(db_url) as store:
        got = store.features(
            arch="gfx942",
            toolchain={"triton": "3.6.0"},
            problem=Problem.of("gemm", 16, 64, 64),
            kernels={"triton": ("gemm.triton", "h")},
        )
    assert sorted(f.vgprs for f, _ in got.values()) == list(range(1, 21))


def test_a_missing_original_table_is_still_damage(tmp_path: Path) -> None:
    path = tmp_path / "damaged.db"
    Store(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TABLE sweeps")
        conn.execute("DROP TABLE static_features")
    with pytest.raises(StoreError, match="lacks tables sweeps: it is damaged"):
        Store(str(path))
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "static_features" not in tables  # a refused database is left as it was


# -- emit: model predictions superseded by measurements --------------------------------------------------

MODEL_GPU = Target.for_arch(ARCH)  # compile-only: no GPU present, this machine's toolchain
MI300X = dataclasses.replace(MODEL_GPU, toolchain={"torch": "2.13.0+rocm7.0", "hip": "7.0"}, present=True)
MI300X_NEWER = dataclasses.replace(MI300X, toolchain={"torch": "2.14.0+rocm7.1", "hip": "7.1"})
H100 = Target.for_arch("sm_90")
VENDOR = Config(backend="torch")


def ok(config: Config, t: float) -> TrialResult:
    return TrialResult(
        config, TrialStatus.OK, timing=Timing(t, t, t, t, t, 0.0, 10, "events"), rel_error=1e-3
    )


def trial(store: Store, target: Target, problem: Problem, config: Config, t: float, source: Source) -> None:
    kernel = ("gemm.torch", "v") if config.backend == "torch" else KERNEL
    assert store.record(
        target=target,
        kernel=kernel[0],
        source_hash=kernel[1],
        problem=problem,
        result=ok(config, t),
        source=source,
    )


P16 = Problem.of("gemm", 16, 4096, 4096)
P64 = Problem.of("gemm", 64, 4096, 4096)  # same shape family as P16: another bucket of the same entry
P_WIDE = Problem.of("gemm", 16, 8192, 4096)


def model_sweep(store: Store) -> None:
    for problem, bm in ((P16, 16), (P64, 64), (P_WIDE, 32)):
        trial(store, MODEL_GPU, problem, cfg(bm), 5.0, Source.MODEL)
        trial(store, MODEL_GPU, problem, cfg(bm * 2), 7.0, Source.MODEL)
        trial(store, MODEL_GPU, problem, VENDOR, 10.0, Source.MODEL)


def bucket_of(table: Table, problem: Problem) -> tuple[Config, float | None, bool]:
    b = table.lookup_bucket("gemm", problem.M, problem.N, problem.K)
    assert b is not None and b.m == problem.M
    return (b.config, b.time_us, b.predicted)


def test_identities_agree_and_fingerprints_differ() -> None:
    assert MODEL_GPU.device_key() == MI300X.device_key() == MI300X_NEWER.device_key()
    assert len({MODEL_GPU.fingerprint(), MI300X.fingerprint(), MI300X_NEWER.fingerprint()}) == 3


def test_model_only_gives_a_predicted_table(store: Store, tmp_path: Path) -> None:
    model_sweep(store)
    table = emit_table(store)
    assert table.predicted is True and table.fingerprint == MODEL_GPU.fingerprint()
    assert bucket_of(table, P16) == (cfg(16), 5.0, True)
    assert bucket_of(table, P64) == (cfg(64), 5.0, True)
    assert bucket_of(table, P_WIDE) == (cfg(32), 5.0, True)
    path = tmp_path / "t.json"
    table.save(path)
    loaded = Table.load(path)
    assert loaded.predicted and loaded.entries == table.entries
    data = json.loads(path.read_text())
    assert data["predicted"] is True
    assert [b["predicted"] for e in data["entries"] for b in e["buckets"]] == [True, True, True]


def test_measured_supersedes_model_per_problem(store: Store, tmp_path: Path) -> None:
    model_sweep(store)
    # The real MI300X measures P16 only: the model's pick is slower there than another config.
    trial(store, MI300X, P16, cfg(16), 9.0, Source.MEASURED)
    trial(store, MI300X, P16, cfg(256, nonkdim=32), 6.0, Source.MEASURED)
    trial(store, MI300X, P16, VENDOR, 8.0, Source.MEASURED)

    table = emit_table(store)
    assert bucket_of(table, P16) == (cfg(256, nonkdim=32), 6.0, False)
    assert bucket_of(table, P64) == (cfg(64), 5.0, True)  # same entry, still the model's pick
    assert bucket_of(table, P_WIDE) == (cfg(32), 5.0, True)
    assert table.predicted is True
    assert table.fingerprint == MI300X.fingerprint() and table.device_key == MODEL_GPU.device_key()
    # Either fingerprint (or a prefix) names the same device and gives the same table.
    for fp in (MODEL_GPU.fingerprint()[:8], MI300X.fingerprint()):
        again = emit_table(store, fingerprint=fp)
        assert again.entries == table.entries and again.fingerprint == MI300X.fingerprint()
    # On disk the measured bucket has no marker (as before); the predicted ones say so.
    path = tmp_path / "mixed.json"
    table.save(path)
    data = json.loads(path.read_text())
    marks = {(e["n"], b["m"]): b.get("predicted") for e in data["entries"] for b in e["buckets"]}
    assert marks == {(4096, 16): None, (4096, 64): True, (8192, 16): True}
    assert data["predicted"] is True
    loaded = Table.load(path)
    assert bucket_of(loaded, P16)[2] is False and bucket_of(loaded, P64)[2] is True

    # Once every problem is measured, nothing is predicted.
    for problem in (P64, P_WIDE):
        trial(store, MI300X, problem, cfg(128), 20.0, Source.MEASURED)
        trial(store, MI300X, problem, VENDOR, 19.0, Source.MEASURED)  # vendor is faster here
    table = emit_table(store)
    assert table.predicted is False
    assert [bucket_of(table, p) for p in (P16, P64, P_WIDE)] == [
        (cfg(256, nonkdim=32), 6.0, False),
        (VENDOR, 19.0, False),
        (VENDOR, 19.0, False),
    ]


def test_the_vendor_margin_still_applies_to_the_chosen_winner(store: Store) -> None:
    model_sweep(store)
    trial(store, MI300X, P16, cfg(16), 9.95, Source.MEASURED)
    trial(store, MI300X, P16, VENDOR, 10.0, Source.MEASURED)
    assert bucket_of(emit_table(store), P16) == (VENDOR, 10.0, False)
    assert bucket_of(emit_table(store, vendor_margin=0.0), P16) == (cfg(16), 9.95, False)
    # the model's winners obey it too: 5.0 beats the modelled vendor's 10.0 by far, so triton stays
    assert bucket_of(emit_table(store, vendor_margin=0.5), P64) == (cfg(64), 5.0, True)
    assert bucket_of(emit_table(store, vendor_margin=1.0), P64) == (VENDOR, 10.0, True)


def test_the_newest_measurement_of_a_device_wins(store: Store) -> None:
    trial(store, MI300X, P16, cfg(16), 4.0, Source.MEASURED)  # older toolchain, faster
    trial(store, MI300X, P64, cfg(64), 4.0, Source.MEASURED)  # measured only on the older toolchain
    trial(store, MI300X_NEWER, P16, cfg(32), 6.0, Source.MEASURED)  # newer toolchain, slower
    table = emit_table(store)
    assert bucket_of(table, P16) == (cfg(32), 6.0, False)
    assert bucket_of(table, P64) == (cfg(64), 4.0, False)
    assert table.predicted is False and table.fingerprint == MI300X_NEWER.fingerprint()


def test_two_devices_still_need_a_choice(store: Store) -> None:
    model_sweep(store)
    trial(store, MI300X, P16, cfg(16), 9.0, Source.MEASURED)
    trial(store, H100, P16, cfg(128), 3.0, Source.MEASURED)
    with pytest.raises(ValueError, match="holds 2 GPUs; pick one with --gpu") as info:
        emit_table(store)
    message = str(info.value)
    assert (
        H100.fingerprint() in message
        and MI300X.fingerprint() in message
        and MODEL_GPU.fingerprint() in message
    )

    h100 = emit_table(store, fingerprint=H100.fingerprint()[:10])
    assert h100.fingerprint == H100.fingerprint() and not h100.predicted
    assert [bucket_of(h100, P16)] == [(cfg(128), 3.0, False)] and len(h100) == 1
    amd = emit_table(store, fingerprint=MODEL_GPU.fingerprint())
    assert amd.device_key == MI300X.device_key() and len(amd) == 3
    assert bucket_of(amd, P16) == (cfg(16), 9.0, False) and amd.predicted
    with pytest.raises(ValueError, match="no tuned results for GPU 0000000000"):
        emit_table(store, fingerprint="0000000000")


def test_a_table_file_without_bucket_markers_reads_as_measured() -> None:
    table = Table.from_winners(MI300X, [(P16, cfg(16), 1.0), (P64, cfg(64), 2.0, True)])
    assert table.predicted is True and [bucket_of(table, p)[2] for p in (P16, P64)] == [False, True]
    data = json.loads(table.to_json())
    for entry in data["entries"]:
        for b in entry["buckets"]:
            b.pop("predicted", None)
    data["predicted"] = False
    old = Table.from_json(json.dumps(data))
    assert old.predicted is False and [bucket_of(old, p)[2] for p in (P16, P64)] == [False, False]
    assert not Table.from_winners(MI300X, [(P16, cfg(16), 1.0)]).predicted
    all_predicted = Table.from_winners(MI300X, [(P16, cfg(16), 1.0)], predicted=True)
    assert all_predicted.predicted and bucket_of(all_predicted, P16)[2] is True
