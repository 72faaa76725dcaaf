"""The first MI300X (MI355X) user's path, run through the fake ROCm GPU: `autotune sweep` of a tiny spec,
`best`, `emit`, the dispatch guard, the served call of every op against its reference, `verify`, `export`
in every format, and the sweep's configs compiled for the real arch.

The sweep runs in this process (`autotune sweep --executor inline`): the worker processes of a normal
sweep are spawned and would not inherit the fake, while the inline worker runs the very code a worker
runs (Benchmarker, the vendor library, the AMD launch options) under it, and the rest of `autotune
sweep` (its GPU detection, the static checker compiling every config for the GPU's arch in its own
processes, the final round and the M profile) is the measured sweep's own. Each GPU's sweep runs once
(the first test that needs it) and later tests read its database.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch
from fake_rocm import GPUS, MI300X, MI355X, FakeGpu, FakeRocm, Launch, VendorCall, faked

from autotune import Config, Problem
from autotune.cli import main
from autotune.core.op import kernel_versions
from autotune.core.result import TrialStatus
from autotune.core.target import interpreting, local_target
from autotune.db import Store
from autotune.engine.bench import rel_error
from autotune.kernels import OPS
from autotune.kernels.moe.formats.vllm_rules import OUR_KEYS

pytestmark = pytest.mark.skipif(not interpreting(), reason="the fake GPU runs its kernels in the interpreter")

AMD_KNOBS = ("matrix_instr_nonkdim", "waves_per_eu", "kpack")
SPEC = """name = "rocm-first-contact"

[[sweep]]
op = "gemm"
m = [16]
nk = [[64, 64]]
strategy = "exhaustive"
trials = 3
final_rounds = 1
profile_m = [1, 16]

[[sweep]]
op = "gemm_fp8_rowwise"
m = [16]
nk = [[128, 256]]
strategy = "exhaustive"
trials = 2
final_rounds = 0
profile_m = false

[[sweep]]
op = "moe"
m = [4]
nk = [[128, 256]]
e = 4
topk = 2
weights = "fp8e4m3"
strategy = "random"
seed = {seed}
trials = 3
final_rounds = 0
profile_m = false
"""
QUANT_OPS = ("gemm_fp8_rowwise", "gemm_fp8_blockwise", "gemm_mxfp8", "gemm_mxfp4", "gemm_mxfp4_bf16a")
GEMM_ONLY = 'name = "gemm-only"\n[[sweep]]\nop = "gemm"\nm = [16]\nnk = [[64, 64]]\n'
MOE_PROBLEM = Problem.of("moe", 4, 128, 256, variant="fp8e4m3", E=4, topk=2)


@dataclass
class Swept:
    """One GPU's sweep: its database, the emitted table, what the sweep printed and launched."""

    gpu: FakeGpu
    folder: Path
    code: int
    out: str
    seconds: float
    launches: list[Launch]
    vendor: list[VendorCall]
    flushes: list[int]
    table: Path = field(init=False)

    def __post_init__(self) -> None:
        self.table = self.folder / "table.json"

    @property
    def db(self) -> str:
        return str(self.folder / "autotune.db")


_swept: dict[str, Swept] = {}


def _moe_seed() -> int:
    """A seed whose random search tries, after the vendor and the default, a config vLLM's kernel can run
    (so that `export --format vllm` has one to write): what the first user gets from a real sweep."""
    from autotune.engine.strategies import Budget, RandomSearch
    from autotune.kernels import MOE
    from autotune.kernels.moe.formats.vllm_rules import OUR_KEYS

    space = MOE.space(MOE_PROBLEM, local_target())
    for seed in range(500):
        third = RandomSearch(space, Budget(trials=3), seed=seed).upcoming(3)[2]
        if all(third.get(k, v) == v for k, v in OUR_KEYS.items()):
            return seed
    raise AssertionError("no seed tries a vLLM config third")


def swept(gpu: FakeGpu, tmp_path_factory: pytest.TempPathFactory) -> Swept:
    """`gpu`'s sweep (run under its fake the first time), then `autotune emit` of its table."""
    found = _swept.get(gpu.key)
    if found is not None:
        return found
    folder = tmp_path_factory.mktemp(f"sweep-{gpu.key}")
    with faked(gpu) as fake:
        spec = folder / "spec.toml"
        spec.write_text(SPEC.format(seed=_moe_seed()))
        out = io.StringIO()
        t0 = time.perf_counter()
        with contextlib.redirect_stdout(out):
            code = main(["sweep", str(spec), "--db", str(folder / "autotune.db"), "--executor", "inline",
                         "--workers", "1", "--log-dir", "none", "--no-progress"])  # fmt: skip
        done = Swept(gpu, folder, code, out.getvalue(), time.perf_counter() - t0, list(fake.launches),
                     list(fake.vendor_calls), list(fake.flushes))  # fmt: skip
        with contextlib.redirect_stdout(io.StringIO()):
            assert main(["emit", "--out", str(done.table), "--db", done.db]) == 0
    _swept[gpu.key] = done
    return done


@pytest.fixture
def sweep_of(tmp_path_factory: pytest.TempPathFactory) -> Callable[[FakeGpu], Swept]:
    return lambda gpu: swept(gpu, tmp_path_factory)


def amd_knobs(config: Config) -> dict[str, Any]:
    return {k: config[k] for k in AMD_KNOBS if k in config}


def launched_with(launches: list[Launch], kernel: str, config: Config) -> list[Launch]:
    """The launches of `kernel` whose compile options are `config`'s (warps, stages, the AMD knobs)."""
    want = {"num_warps": config["num_warps"], "num_stages": config["num_stages"], **amd_knobs(config)}
    return [x for x in launches if x.kernel == kernel and {k: x.options.get(k) for k in want} == want]


gpus = pytest.mark.parametrize("gpu", GPUS, ids=[g.key for g in GPUS])


# -- autotune sweep ----------------------------------------------------------------------------------------


@gpus
def test_the_sweep_tunes_on_the_gpu_with_its_amd_knobs(
    gpu: FakeGpu, sweep_of: Callable[[FakeGpu], Swept]
) -> None:
    s = sweep_of(gpu)
    assert s.code == 0, s.out
    assert f"problems on {gpu.name} ({gpu.arch}, {gpu.multi_processor_count} CUs)" in s.out
    with Store(s.db) as store:
        (row,) = store.gpus()
        trials = store.trials()
        features = {
            (t.problem, t.config.digest()): store.features(
                arch=gpu.arch, toolchain=row.target.toolchain, problem=t.problem,
                kernels=kernel_versions(OPS[t.problem.op], ["triton"]),
            ).get(t.config.digest())
            for t in trials if t.backend == "triton"
        }  # fmt: skip
    target = row.target
    assert (target.arch, target.name, target.cu_count, target.vendor) == (
        gpu.arch, gpu.name, gpu.multi_processor_count, "amd"
    )  # fmt: skip
    assert target.toolchain["hip"] == "7.0.0"
    assert "cuda" not in target.toolchain and not row.interpreter
    assert trials and all(t.status is TrialStatus.OK for t in trials), [t.error for t in trials if not t.ok]
    assert {t.problem.op for t in trials} == {"gemm", "gemm_fp8_rowwise", "moe"}
    ours = [t for t in trials if t.backend == "triton"]
    assert ours
    for t in ours:  # the knobs the space chose, and each launched with exactly them
        assert {"matrix_instr_nonkdim", "waves_per_eu"} <= set(t.config)
        assert ("kpack" in t.config) == (gpu.arch == "gfx942"), t.config.short()
        kernel = {"gemm": "gemm_kernel", "gemm_fp8_rowwise": "gemm_fp8_kernel", "moe": "moe_gemm_kernel"}
        assert launched_with(s.launches, kernel[t.problem.op], t.config), t.config.short()
    assert all("kpack" not in x.options for x in s.launches) == (gpu.arch == "gfx950")
    assert not any(x.numerics.get("DOT_F32") is False for x in s.launches)
    # the vendor library: hipBLASLt's torch.mm, and torch._scaled_mm on the GPU's own FP8
    assert any(v.fn == "mm" and v.dtypes == (torch.bfloat16,) * 2 for v in s.vendor)
    scaled = [v for v in s.vendor if v.fn == "_scaled_mm"]
    assert scaled and all(v.dtypes == (gpu.fp8, gpu.fp8) for v in scaled)
    # FP8 MoE weights in the GPU's own flavour; the cache flush twice the 256 MB last-level cache
    assert all(gpu.fp8 in x.dtypes for x in s.launches if x.kernel == "moe_gemm_kernel")
    assert s.flushes and set(s.flushes) == {2 * 256 << 20}
    # every config measured was compiled for the real arch by the sweep's static checker, and passed
    assert features and all(found is not None for found in features.values()), features
    assert all(f.compiled and f.arch == gpu.arch and not findings for f, findings in features.values())


@gpus
def test_best_names_the_gpu(gpu: FakeGpu, sweep_of: Callable[[FakeGpu], Swept], capsys: Any) -> None:
    s = sweep_of(gpu)
    capsys.readouterr()
    with faked(gpu):
        assert main(["best", "--op", "gemm", "--m", "16", "--n", "64", "--k", "64", "--db", s.db]) == 0
    out = capsys.readouterr().out
    assert f"on {gpu.name} ({gpu.arch}, {gpu.multi_processor_count} CUs)" in out and "triton" in out


def test_each_gpu_takes_its_own_table_and_refuses_the_other(sweep_of: Callable[[FakeGpu], Swept]) -> None:
    from autotune.dispatch import Dispatcher, Table

    tables = {gpu.key: Table.load(sweep_of(gpu).table) for gpu in GPUS}
    for gpu, other in ((MI300X, MI355X), (MI355X, MI300X)):
        with faked(gpu):
            own, foreign = tables[gpu.key], tables[other.key]
            assert own.target.name == gpu.name and own.device_key == local_target().device_key()
            with pytest.warns(RuntimeWarning, match=other.name):
                dispatcher = Dispatcher([own, foreign])
            assert dispatcher.tables == (own,)
            config = dispatcher.lookup("gemm", 16, 64, 64)
            assert config is not None and config == own.lookup("gemm", 16, 64, 64)


# -- the served call of every op -------------------------------------------------------------------------


def _quant(op: str) -> Callable[[FakeRocm], tuple[float, float]]:
    def run(fake: FakeRocm) -> tuple[float, float]:
        from autotune.kernels import QUANT_GEMMS, gemm_quant

        quant = QUANT_GEMMS[op]
        problem = Problem.quant(op, 16, 128, 256)
        a, b, sa, sb = quant.make_inputs(problem, "cuda", seed=5)
        if op.startswith("gemm_fp8"):
            assert a.dtype == b.dtype == fake.gpu.fp8
            wrong = torch.float8_e4m3fn if fake.gpu.arch == "gfx942" else torch.float8_e4m3fnuz
            with pytest.raises(ValueError, match="e4m3"):
                gemm_quant(op, a.view(wrong), b.view(wrong), sa, sb)
        out = gemm_quant(op, a, b, sa, sb)
        return rel_error(out, quant.reference(problem, (a, b, sa, sb))), quant.tolerance(problem)

    return run


def _moe(weights: str | None) -> Callable[[FakeRocm], tuple[float, float]]:
    def run(fake: FakeRocm) -> tuple[float, float]:
        from autotune.kernels import MOE, fused_moe

        problem = Problem.of("moe", 4, 128, 256, variant=weights, E=4, topk=2)
        x, w1, w2, wt, ids, s1, s2 = MOE.make_inputs(problem, "cuda", seed=6)
        kw: dict[str, Any] = dict(w1_scale=s1, w2_scale=s2)
        if weights == "fp8e4m3":
            kw["block_shape"] = [128, 128]
            assert w1.dtype == fake.gpu.fp8
            wrong = torch.float8_e4m3fn if fake.gpu.arch == "gfx942" else torch.float8_e4m3fnuz
            with pytest.raises(ValueError, match=f"{fake.gpu.arch} has no"):
                fused_moe(x, w1.view(wrong), w2.view(wrong), wt, ids, **kw)
        out = fused_moe(x, w1, w2, wt, ids, **kw)
        return rel_error(out, MOE.reference(problem, (x, w1, w2, wt, ids, s1, s2))), MOE.tolerance(problem)

    return run


def _mla(kv: str) -> Callable[[FakeRocm], tuple[float, float]]:
    def run(fake: FakeRocm) -> tuple[float, float]:
        from autotune.kernels import mla_decode
        from autotune.kernels.mla.ref import mla_reference, paged_inputs

        dtype = torch.bfloat16 if kv == "bf16" else fake.gpu.fp8
        inputs = paged_inputs(4, 32, 16, 16, [40, 9], kv_dtype=dtype, device="cuda", seed=7)
        q, cache, table, lens, scale = inputs
        if kv != "bf16":
            wrong = torch.float8_e4m3fn if fake.gpu.arch == "gfx942" else torch.float8_e4m3fnuz
            with pytest.raises(ValueError, match="FP8"):
                mla_decode(q, cache.view(wrong), table, lens, sm_scale=0.2, kv_scale=scale, latent=32)
        out = mla_decode(q, cache, table, lens, sm_scale=0.2, kv_scale=scale, latent=32)
        return rel_error(out, mla_reference(q, cache, table, lens, 0.2, 32, scale)), 0.02

    return run


def _gemm(fake: FakeRocm) -> tuple[float, float]:
    from autotune.kernels import GEMM, gemm

    problem = Problem.of("gemm", 16, 64, 64)
    a, b = GEMM.make_inputs(problem, "cuda", seed=8)
    return rel_error(gemm(a, b), GEMM.reference(problem, (a, b))), GEMM.tolerance(problem)


def _linear(fake: FakeRocm) -> tuple[float, float]:
    from autotune.kernels import linear

    gen = torch.Generator(device="cuda").manual_seed(9)
    x = torch.randn(8, 64, generator=gen, device="cuda").to(torch.bfloat16)
    w = torch.randn(48, 64, generator=gen, device="cuda").to(torch.bfloat16)
    bias = torch.randn(48, generator=gen, device="cuda").to(torch.bfloat16)
    ref = x.double() @ w.double().t() + bias.double()
    return rel_error(linear(x, w, bias), ref), 1e-2


def _topk(fake: FakeRocm) -> tuple[float, float]:
    from autotune.kernels import fused_topk

    gen = torch.Generator(device="cuda").manual_seed(10)
    x = torch.randn(6, 64, generator=gen, device="cuda").to(torch.bfloat16)
    logits = torch.randn(6, 8, generator=gen, device="cuda")
    weights, ids = fused_topk(x, logits, 2)
    ref = torch.softmax(logits.double(), -1).topk(2)
    ref_w = ref.values / ref.values.sum(-1, keepdim=True)
    assert torch.equal(ids.long().cpu(), ref.indices.cpu()) and ids.is_cuda
    return rel_error(weights, ref_w), 1e-5


SERVED: dict[str, Callable[[FakeRocm], tuple[float, float]]] = {
    "gemm": _gemm,
    "linear": _linear,
    **{op: _quant(op) for op in QUANT_OPS},
    "moe bf16": _moe(None),
    "moe fp8": _moe("fp8e4m3"),
    "moe mxfp4": _moe("mxfp4"),
    "fused_topk": _topk,
    "mla bf16": _mla("bf16"),
    "mla fp8": _mla("fp8e4m3"),
}


@gpus
@pytest.mark.parametrize("call", list(SERVED))
def test_the_served_call_of_every_op(
    gpu: FakeGpu, call: str, sweep_of: Callable[[FakeGpu], Swept], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each entry point on "cuda" tensors of the GPU, with the sweep's table loaded ($AUTOTUNE_TABLES, as
    a serving process loads it), against its reference; NaN never passes. Every Triton launch carries the
    AMD knobs of the config served (the table's, else the op's fallback) and no kpack on gfx950."""
    table = sweep_of(gpu).table
    monkeypatch.setenv("AUTOTUNE_TABLES", str(table))
    with faked(gpu) as fake, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # untuned shapes
        err, tol = SERVED[call](fake)
        launches = list(fake.launches)
    assert err <= tol, f"{call} on {gpu.name}: relative error {err:.3g} > {tol}"
    assert all(("kpack" in x.options) <= (gpu.arch == "gfx942") for x in launches)
    for x in launches:
        if "waves_per_eu" in x.options or "matrix_instr_nonkdim" in x.options:
            assert x.options.get("matrix_instr_nonkdim", 16) in (16, 32)
            assert x.options["waves_per_eu"] in (0, 1, 2)


@gpus
def test_a_table_s_triton_config_is_launched_with_its_amd_knobs(
    gpu: FakeGpu, sweep_of: Callable[[FakeGpu], Swept]
) -> None:
    """The sweep's Triton config of the GEMM, served from a table: its knobs reach the launch unchanged."""
    from autotune.dispatch import Dispatcher, Table, install_dispatcher
    from autotune.kernels import GEMM, gemm

    s = sweep_of(gpu)
    with Store(s.db) as store:
        config = next(t.config for t in store.trials() if t.problem.op == "gemm" and t.backend == "triton")
    problem = Problem.of("gemm", 16, 64, 64)
    with faked(gpu) as fake:
        table = Table.from_winners(local_target(), [(problem, config, 1.0)])
        previous = install_dispatcher(Dispatcher([table]))
        try:
            a, b = GEMM.make_inputs(problem, "cuda", seed=11)
            out = gemm(a, b)
        finally:
            install_dispatcher(previous)
        assert rel_error(out, GEMM.reference(problem, (a, b))) <= GEMM.tolerance(problem)
        assert launched_with(fake.launches, "gemm_kernel", config), (config.short(), fake.launches)


COMPILE_ONLY = """name = "no-gpu-here"
[static]
candidates = 2
[[sweep]]
op = "gemm"
m = [16]
nk = [[64, 128]]
backends = ["triton"]
"""


@gpus
def test_a_compile_only_sweep_s_picks_are_served_on_the_gpu(
    gpu: FakeGpu, sweep_of: Callable[[FakeGpu], Swept], tmp_path: Path, capsys: Any
) -> None:
    """The user's database: the cost model's picks of a compile-only sweep for the arch, run on a machine
    without the GPU (`--target gfx942`), and the GPU's own sweep. On the GPU they are one device: `emit`
    takes both (the table predicted), the predicted Triton config is served with its AMD knobs, and
    `export --predicted` writes the predictions beside the measurements in aiter's and vLLM's files."""
    import shutil

    db = tmp_path / "both.db"
    shutil.copy(sweep_of(gpu).db, db)
    spec = tmp_path / "no-gpu.toml"
    spec.write_text(COMPILE_ONLY)
    args = ["--db", str(db), "--workers", "1", "--log-dir", "none", "--no-progress"]
    assert main(["sweep", str(spec), "--target", gpu.arch, *args]) == 0  # no fake GPU: this CPU machine
    table = tmp_path / "table.json"
    with faked(gpu) as fake:
        assert main(["emit", "--out", str(table), "--db", str(db)]) == 0
        from autotune.dispatch import Dispatcher, Table, install_dispatcher
        from autotune.kernels import GEMM, gemm

        loaded = Table.load(table)
        assert loaded.predicted and loaded.target.name == gpu.name and loaded.target.toolchain.get("hip")
        predicted = loaded.lookup("gemm", 16, 64, 128)
        assert predicted is not None and predicted.backend == "triton"
        assert loaded.lookup("gemm", 16, 64, 64) is not None  # the measured shape, in the same table
        previous = install_dispatcher(Dispatcher([loaded]))
        try:
            problem = Problem.of("gemm", 16, 64, 128)
            a, b = GEMM.make_inputs(problem, "cuda", seed=12)
            out = gemm(a, b)
        finally:
            install_dispatcher(previous)
        assert rel_error(out, GEMM.reference(problem, (a, b))) <= GEMM.tolerance(problem)
        assert launched_with(fake.launches, "gemm_kernel", predicted), predicted.short()
        capsys.readouterr()
        aiter = tmp_path / "aiter"
        assert main(["export", "--format", "aiter", "--predicted", "--out", str(aiter), "--db", str(db)]) == 0
    assert "cost model's picks" in capsys.readouterr().out
    with (aiter / "bf16_tuned_gemm.csv").open(newline="") as f:
        rows = {(r["M"], r["N"], r["K"]): r for r in csv.DictReader(f)}
    assert rows[("16", "64", "128")]["gfx"] == gpu.arch and ("16", "64", "64") in rows


@gpus
def test_a_prediction_for_the_arch_joins_the_gpu_s_vllm_file(
    gpu: FakeGpu, sweep_of: Callable[[FakeGpu], Swept], tmp_path: Path, capsys: Any
) -> None:
    """A compile-only pick for the arch (another fingerprint of the same device) at an M the GPU did not
    measure: `export --format vllm --predicted` writes it into the GPU's file beside the measured M."""
    import shutil

    from autotune.core.result import Source, Timing, TrialResult
    from autotune.core.target import Target
    from autotune.kernels import MOE

    db = tmp_path / "both.db"
    shutil.copy(sweep_of(gpu).db, db)
    with Store(str(db)) as store:
        measured = [t for t in store.trials() if t.problem == MOE_PROBLEM and t.backend == "triton"]
        config = next(t.config for t in measured if all(t.config.get(k, v) == v for k, v in OUR_KEYS.items()))
        name, source_hash = kernel_versions(MOE, ["triton"])["triton"]
        timing = Timing(5.0, 5.0, 5.0, 5.0, 5.0, 0.0, 1, "model")
        result = TrialResult(config, TrialStatus.OK, timing=timing)
        arch = Target.for_arch(gpu.arch)
        assert store.record(target=arch, kernel=name, source_hash=source_hash, problem=MOE_PROBLEM.with_m(8),
                            result=result, source=Source.MODEL)  # fmt: skip
    out = tmp_path / "vllm"
    with faked(gpu):
        assert main(["export", "--format", "vllm", "--predicted", "--out", str(out), "--db", str(db)]) == 0
    (file,) = out.glob("*.json")
    assert set(json.loads(file.read_text())) - {"triton_version"} == {"4", "8"}
    assert "1 of its 2 entries predicted" in capsys.readouterr().out


# -- autotune verify -----------------------------------------------------------------------------------------


@gpus
def test_verify_runs_on_the_gpu_and_refuses_clearly(
    gpu: FakeGpu, sweep_of: Callable[[FakeGpu], Swept], tmp_path: Path, capsys: Any
) -> None:
    s = sweep_of(gpu)
    other = sweep_of(MI355X if gpu is MI300X else MI300X)
    spec = tmp_path / "gemm.toml"
    spec.write_text(GEMM_ONLY)
    out = tmp_path / "verify.json"
    capsys.readouterr()
    with faked(gpu):
        args = ["--m", "1,16", "--rounds", "1", "--no-progress", "--out", str(out)]
        assert main(["verify", str(s.table), "--problems", str(spec), *args]) == 0
        printed = capsys.readouterr().out
        assert f"on {gpu.name} ({gpu.arch}" in printed and str(s.table) in printed
        rows = json.loads(out.read_text())["rows"]
        assert {r["M"] for r in rows} == {1, 16} and {r["op"] for r in rows} == {"gemm"}
        assert main(["verify", "--problems", str(spec), *args]) == 0  # the fallbacks, no table
        assert "no table" in capsys.readouterr().out
        assert main(["verify", str(other.table), *args]) == 2
        err = capsys.readouterr().err
        assert f"tuned on {other.gpu.name}" in err and f"this is {gpu.name}" in err
        assert main(["verify", str(s.table), "--device", "1", *args]) == 2
        assert "verify times on a GPU: GPU index 1 does not exist; 1 visible" in capsys.readouterr().err
        assert main(["verify", str(s.table), "--interpret", *args]) == 2  # (sets TRITON_INTERPRET: last)
        assert "but this is Triton CPU interpreter" in capsys.readouterr().err


# -- autotune export -----------------------------------------------------------------------------------------


@gpus
def test_export_writes_every_format_for_the_gpu(
    gpu: FakeGpu, sweep_of: Callable[[FakeGpu], Swept], tmp_path: Path, capsys: Any
) -> None:
    s = sweep_of(gpu)
    with faked(gpu):
        for fmt in ("csv", "vllm", "sglang", "aiter"):
            assert main(["export", "--format", fmt, "--out", str(tmp_path / fmt), "--db", s.db]) == 0, fmt
    capsys.readouterr()
    (sheet,) = (tmp_path / "csv").iterdir()
    with sheet.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["arch"], r["cu_count"]) for r in rows} == {(gpu.arch, str(gpu.multi_processor_count))}
    assert {r["runtime"] for r in rows} == {"7.0.0"} and {r["interpreter"] for r in rows} == {"False"}
    ours = [r for r in rows if r["backend"] == "triton"]  # (the vendor may win every shape: timings are fake)
    assert all((r.get("cfg_kpack", "") != "") == (gpu.arch == "gfx942") for r in ours)
    device = gpu.name.replace(" ", "_")
    for flavor, shape in (("vllm", "[128,128]"), ("sglang", "[128, 128]")):
        files = list((tmp_path / flavor).rglob("*.json"))
        name = f"E=4,N=128,device_name={device},dtype=fp8_w8a8,block_shape={shape}.json"
        assert [f.name for f in files] == [name], files
        entries = json.loads(files[0].read_text())
        assert set(entries) - {"triton_version"} == {"4"}
        entry = entries["4"]
        assert {"waves_per_eu", "matrix_instr_nonkdim"} <= set(entry)
        assert ("kpack" in entry) == (gpu.arch == "gfx942")
    assert (tmp_path / "sglang" / "triton_3_9_0").is_dir() or any((tmp_path / "sglang").glob("triton_*"))
    with (tmp_path / "aiter" / "a8w8_tuned_gemm.csv").open(newline="") as f:
        (a8w8,) = list(csv.DictReader(f))
    with (tmp_path / "aiter" / "bf16_tuned_gemm.csv").open(newline="") as f:
        (bf16,) = list(csv.DictReader(f))
    assert (a8w8["gfx"], a8w8["cu_num"]) == (gpu.arch, str(gpu.multi_processor_count))
    assert a8w8["q_dtype_w"] == str(gpu.fp8) and bf16["gfx"] == gpu.arch


# -- the sweep's configs compiled for the real arch ------------------------------------------------------

COMPILE = """
from autotune import Config, Problem
from autotune.core.static import StaticPolicy, check_features
from autotune.engine.compile import compile_features
from autotune.kernels import OPS

out = []
for op, M, N, K, params, config in json.loads(sys.argv[2]):
    problem, config = Problem.from_params(op, M, N, K, params), Config.from_json(config)
    features = compile_features(OPS[op], problem, config, target)
    found = StaticPolicy().pruning(check_features(features, config, target), frozenset())
    checks = [f.check for f in found]
    out.append([config.short(), features.compiled, features.spills, checks, features.error[:300]])
print(json.dumps(out))
"""


@gpus
def test_the_sweep_s_configs_compile_for_the_real_arch(
    gpu: FakeGpu, sweep_of: Callable[[FakeGpu], Swept], compile_on_arch: Callable[..., Any]
) -> None:
    """compile_features for gfx942 / gfx950 (Triton cross-compiles, no GPU) of every Triton config the
    sweep measured under the fake: each compiles, with no spills or other finding the static policy
    prunes on."""
    s = sweep_of(gpu)
    with Store(s.db) as store:
        measured = {(t.problem, t.config) for t in store.trials() if t.backend == "triton"}
    ordered = sorted(measured, key=lambda pc: (pc[0].key(), pc[1].digest()))
    payload = [[p.op, p.M, p.N, p.K, json.dumps(p.params()), c.canonical()] for p, c in ordered]
    found = compile_on_arch(COMPILE, gpu.arch, payload)
    assert len(found) == len(payload) >= 3
    for short, compiled, spills, pruning, error in found:
        assert compiled and not pruning, (short, spills, pruning, error)
