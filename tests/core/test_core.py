from __future__ import annotations

import dataclasses
import pickle

import pytest

from autotune import Config, Problem, Target, TargetError


def test_problem_flops_bytes_and_key() -> None:
    p = Problem.of("gemm", 16, 4096, 1024, "bf16")
    assert p.flops() == 2 * 16 * 4096 * 1024
    assert p.min_bytes() == 2 * (16 * 1024 + 4096 * 1024 + 16 * 4096)
    assert p.key() == "gemm:M=16,N=4096,K=1024:bf16,bf16,bf16:nk"
    assert Problem.of("gemm", 16, 4096, 1024, "bfloat16") == p  # aliases normalise
    assert p.with_m(32).M == 32


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(M=0), "M must be a positive integer"),
        (dict(N=-3), "N must be a positive integer"),
        (dict(K=2.5), "K must be a positive integer"),
        (dict(op="conv"), "unknown op 'conv'"),
        (dict(dtype_a="int3"), "unknown dtype 'int3'"),
        (dict(layout="tt"), "unknown layout 'tt'"),
    ],
)
def test_problem_rejects_bad_fields(kwargs: dict, message: str) -> None:
    base = dict(op="gemm", M=1, N=2, K=3)
    base.update(kwargs)
    with pytest.raises(ValueError, match=message):
        Problem(**base)


def test_config_canonical_hash_and_digest_are_stable() -> None:
    a = Config(backend="triton", BLOCK_M=64, BLOCK_N=32)
    b = Config({"BLOCK_N": 32, "BLOCK_M": 64}, backend="triton")
    assert a == b and hash(a) == hash(b)
    assert a.canonical() == '{"BLOCK_M":64,"BLOCK_N":32,"backend":"triton"}'
    assert Config.from_json(a.canonical()) == a
    assert pickle.loads(pickle.dumps(a)) == a
    assert a.replace(BLOCK_M=128)["BLOCK_M"] == 128 and a["BLOCK_M"] == 64
    with pytest.raises(TypeError):
        Config(BLOCK_M=[1, 2])  # type: ignore[arg-type]


def test_config_digest_known_value() -> None:
    import hashlib

    c = Config(backend="torch")
    assert c.digest() == hashlib.sha256(b'{"backend":"torch"}').hexdigest()[:16]
    assert c.digest() == c.digest()  # kept after the first call
    assert pickle.loads(pickle.dumps(c)).digest() == c.digest()


def test_a_problem_with_another_shape_is_checked_as_a_new_one() -> None:
    p = Problem.of("gemm", 16, 4096, 1024, "fp16")
    q = p.with_shape(32, 2048, 512)
    assert q == Problem.of("gemm", 32, 2048, 512, "fp16") and hash(q) == hash(
        Problem.of("gemm", 32, 2048, 512, "fp16")
    )
    assert (p.M, p.N, p.K) == (16, 4096, 1024)  # the first is left as it was
    assert q.key() == Problem.of("gemm", 32, 2048, 512, "fp16").key() and q.params_json() == p.params_json()
    for shape in [(0, 1, 1), (1, -2, 1), (1, 1, True)]:
        with pytest.raises(ValueError, match="must be a positive integer") as got:
            p.with_shape(*shape)
        with pytest.raises(ValueError) as built:
            Problem("gemm", *shape, dtype_a="fp16", dtype_b="fp16", dtype_out="fp16")
        assert str(got.value) == str(built.value)
    mla = Problem.of("mla_decode", 4, 512, 576, context=1024, heads=16, kv_dtype="bf16", page_size=64)
    assert mla.with_shape(8, 256, 320) == dataclasses.replace(mla, M=8, N=256, K=320)
    with pytest.raises(ValueError, match="powers of two") as got:
        mla.with_shape(8, 256, 300)  # its op's own rules
    with pytest.raises(ValueError) as built:
        dataclasses.replace(mla, M=8, N=256, K=300)
    assert str(got.value) == str(built.value)


def test_params_json_is_the_problems_own_whatever_was_encoded_before() -> None:
    import json

    problems = [
        Problem.of("gemm", 5, 64, 64, "bf16"),
        Problem.of("gemm", 6, 64, 64, "fp16"),
        Problem.of("gemm", 5, 64, 64, "bf16", layout="kn"),
        Problem.of("moe", 5, 64, 64, E=8, topk=2),
        Problem.of("moe", 5, 64, 64, variant="fp8e4m3", E=8, topk=2),
        Problem.of("mla_decode", 4, 512, 576, context=1024, heads=16, kv_dtype="bf16", page_size=64),
        Problem.of("mla_decode", 4, 512, 576, context=1024, heads=16, kv_dtype="bf16", page_size=32),
    ]
    for p in problems + problems[::-1]:
        assert p.params_json() == json.dumps(p.params(), sort_keys=True, separators=(",", ":"))


def test_target_for_arch_limits_and_fingerprints() -> None:
    mi300 = Target.for_arch("gfx942")
    mi355 = Target.for_arch("MI355X")
    h100 = Target.for_arch("sm_90")
    assert mi300.lds_bytes == 64 * 1024 and mi355.lds_bytes == 160 * 1024
    assert mi300.xcds == 8 and mi300.is_amd and h100.is_nvidia
    assert h100.llc_bytes == 50 << 20 and mi300.llc_bytes == 256 << 20
    assert len({mi300.fingerprint(), mi355.fingerprint(), h100.fingerprint()}) == 3
    other_tools = dataclasses.replace(h100, toolchain={"torch": "0.0"})
    assert other_tools.device_key() == h100.device_key()
    assert other_tools.fingerprint() != h100.fingerprint()
    assert Target.from_dict(h100.to_dict()) == h100
    with pytest.raises(TargetError, match="unknown target 'gfx1'"):
        Target.for_arch("gfx1")


def test_interpreter_target_is_its_own() -> None:
    t = Target.interpreter_target()
    assert t.interpreter and not t.is_amd and not t.is_nvidia
    assert t.device_key() != Target.for_arch("sm_90").device_key()
    assert t.roofline_us(1e9, 1e6) == 0.0


def test_roofline() -> None:
    h100 = Target.for_arch("sm_90")
    p = Problem.of("gemm", 1, 4096, 4096)
    # decode is memory-bound: bytes / bandwidth
    assert h100.roofline_us(p.flops(), p.min_bytes()) == pytest.approx(p.min_bytes() / 3350e3)


def test_kernel_source_hash_ignores_formatting_but_not_code(tmp_path) -> None:
    from autotune.core.codehash import code_hash

    k = tmp_path / "k.py"
    k.write_text("def f(x):\n    return x + 1\n")
    h1 = code_hash(k)
    k.write_text("# a comment\ndef f(x ):\n\n        return x+1  # same code\n")
    assert code_hash(k) == h1
    k.write_text("def f(x):\n    return x + 2\n")
    assert code_hash(k) != h1


def test_code_tokens_keep_an_fstring_whole_on_every_python() -> None:
    from autotune.core.codehash import code_tokens

    src = 'x = f"{a!r:>{w}} and {f\'{b}\'}" + g(1)\ny = f"""\n{c}\n"""\n'
    strings = [text for kind, text in code_tokens(src) if kind == "STRING"]
    assert strings == ["f\"{a!r:>{w}} and {f'{b}'}\"", 'f"""\n{c}\n"""']
    names = [text for kind, text in code_tokens(src) if kind == "NAME"]
    assert names == ["x", "g", "y"]  # the names inside the f-strings are part of their STRING token


@pytest.mark.parametrize("other", ["python3.11", "python3.12", "python3.13"])
def test_kernel_hash_is_the_same_on_other_pythons(other: str) -> None:
    """Stored results are keyed by the kernel hash: another interpreter must compute the same one."""
    import shutil
    import subprocess
    import sys

    import autotune.core.codehash as codehash
    from autotune.kernels import GEMM

    exe = shutil.which(other)
    if exe is None:
        pytest.skip(f"{other} is not installed")
    script = (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('h', sys.argv[1]); "
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
        "print(m.code_hash(*sys.argv[2:]))"
    )
    files = [
        str(f) for f in codehash.module_files("autotune.kernels.dense.kernel", within="autotune.kernels")
    ]
    proc = subprocess.run([exe, "-c", script, codehash.__file__, *files],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    if proc.returncode != 0 and "not found" in proc.stderr:  # a version manager's shim without it
        pytest.skip(proc.stderr.strip()[:200])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == GEMM.source_hash("triton"), sys.version


def test_kernel_hashes_cover_the_jitted_code_their_modules_import(monkeypatch) -> None:
    """Stored times are keyed by their kernel's source hash: every kernels module with jitted code that a
    hashed module imports (edge_clamped, the GEMV helpers, ...) must be hashed too, so that an edit there
    retires the times measured before it; and a Triton backend's hash covers jitted code."""
    import ast
    from pathlib import Path

    import autotune.core.backend as backend
    import autotune.core.codehash as codehash
    import autotune.kernels.dense.op as gemm_op
    import autotune.kernels.moe.op as moe_op
    import autotune.kernels.quant.op as quant_op

    hashed: list[set[Path]] = []
    real = codehash.code_hash

    def record(*paths: Path) -> str:
        hashed.append({Path(p) for p in paths})
        return real(*paths)

    monkeypatch.setattr(codehash, "code_hash", record)

    def jitted(path: Path) -> bool:
        text = path.read_text()
        return "@triton.jit" in text or "@gluon.jit" in text

    def imported(path: Path) -> set[Path]:
        tree = ast.parse(path.read_text())
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        root = Path(codehash.__file__).resolve().parents[2]
        return {root / (m.replace(".", "/") + ".py") for m in mods if m.startswith("autotune.kernels.")}

    ops = [gemm_op.GEMM, moe_op.MOE, *quant_op.QUANT_GEMMS.values()]
    checked = 0
    for target in (Target.for_arch("sm_90"), Target.for_arch("gfx950")):
        for op in ops:
            for name in op.backends(target):
                if op.backend(name).library:
                    continue
                backend._code_version.cache_clear()
                hashed.clear()
                op.source_hash(name)
                files = set().union(*hashed)
                assert any(jitted(f) for f in files), (op.name, name, sorted(files))
                missing = {m for f in files for m in imported(f) if m.is_file() and jitted(m)} - files
                assert not missing, f"{op.name}.{name} hashes {sorted(files)} but not {sorted(missing)}"
                checked += 1
    backend._code_version.cache_clear()
    assert checked >= 20


def test_a_backend_s_files_are_its_module_and_the_kernel_modules_it_imports(tmp_path, monkeypatch) -> None:
    """`module_files` follows imports (top-level, inside functions, relative) within the package named,
    leaves other packages and __init__ files out, and `modules_hash` changes with any file it covers."""
    import sys

    from autotune.core.codehash import module_files, modules_hash

    pkg = tmp_path / "fakepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("import fakepkg.unused\n")
    (pkg / "kernel.py").write_text(
        "import os\nfrom fakepkg import helper\n\ndef f():\n    from .sub import deep\n"
    )
    (pkg / "helper.py").write_text("X = 1\n")
    (pkg / "sub" / "deep.py").write_text("from fakepkg.helper import X\n")
    (pkg / "unused.py").write_text("Y = 2\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        names = [p.relative_to(tmp_path).as_posix() for p in module_files("fakepkg.kernel", within="fakepkg")]
        assert names == ["fakepkg/helper.py", "fakepkg/kernel.py", "fakepkg/sub/deep.py"]
        before = modules_hash("fakepkg.kernel", within="fakepkg")
        (pkg / "sub" / "deep.py").write_text("from fakepkg.helper import X\nZ = X\n")
        assert modules_hash("fakepkg.kernel", within="fakepkg") != before
        (pkg / "unused.py").write_text("Y = 3\n")  # not imported by the kernel: no change
        after = modules_hash("fakepkg.kernel", within="fakepkg")
        (pkg / "unused.py").write_text("Y = 4\n")
        assert modules_hash("fakepkg.kernel", within="fakepkg") == after
        with pytest.raises(ValueError, match="not a module"):
            module_files("fakepkg.sub", within="fakepkg")
    finally:
        for name in [m for m in sys.modules if m == "fakepkg" or m.startswith("fakepkg.")]:
            del sys.modules[name]


def test_sm_is_an_nvidia_targets_compute_capability_and_0_elsewhere() -> None:
    import dataclasses

    h100 = Target.for_arch("sm_90")
    assert h100.sm == 90
    assert dataclasses.replace(h100, arch="sm_90a").sm == 90
    assert dataclasses.replace(h100, arch="sm_100").sm == 100
    assert Target.for_arch("gfx942").sm == 0 and Target.interpreter_target().sm == 0
