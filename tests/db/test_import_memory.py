"""A vLLM-style config file imports in memory that does not grow with it: read a chunk at a time and
written as read (loaded whole, an import took about 51 times the file's size: 5.1 GiB for 100 MB; see
docs/notes/2026-12-07-imports.md for the 100 MB numbers)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = "E=8,N=14336,device_name=NVIDIA_H100_80GB_HBM3.json"

#: Imports the files named (in that order) into databases of their own, and prints the peak resident memory
#: (MiB) after each: the peak rises only where an import needs more than those before.
PROBE = """
import json, resource, sys
from pathlib import Path
from autotune.core.registry import load_plugins
from autotune.db import Store
from autotune.db.interop import import_files

load_plugins()
peaks = []
for i, name in enumerate(sys.argv[1:]):
    path = Path(name)
    with Store(str(path.parent / f"{i}.db")) as store:
        (f,) = import_files(store, [path])
    assert f.written and not f.error, f
    peaks.append([f.written, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024])
print(json.dumps(peaks))
"""


def config_file(folder: Path, mb: float, seed: int) -> Path:
    """A vLLM-style config file of about `mb` MB, as vLLM's writer indents it."""
    rng = random.Random(seed)
    folder.mkdir()
    path = folder / NAME
    with path.open("w") as f:
        f.write('{\n    "triton_version": "3.4.0"')
        m = size = 0
        while not m or size < mb * (1 << 20):
            m += 1
            entry = {
                "BLOCK_SIZE_M": rng.choice([16, 32, 64]), "BLOCK_SIZE_N": rng.choice([32, 64, 128]),
                "BLOCK_SIZE_K": rng.choice([64, 128]), "GROUP_SIZE_M": rng.choice([1, 8, 16]),
                "num_warps": rng.choice([4, 8]), "num_stages": rng.choice([2, 3, 4]),
            }  # fmt: skip
            text = f",\n    {json.dumps(str(m))}: " + json.dumps(entry, indent=4).replace("\n", "\n    ")
            f.write(text)
            size += len(text)
        f.write("\n}\n")
    return path


def test_memory_of_a_config_file_import_grows_sublinearly(tmp_path: Path) -> None:
    """Peak memory of importing 8 MB after 2 MB rises by less than the 6 MB the file grew (loaded whole,
    it rose by some 300 MB), and the 8 MB import takes less than 4 times its size beyond a one-entry
    import's."""
    files = [config_file(tmp_path / str(mb), mb, seed) for seed, mb in enumerate((0, 2, 8))]
    run = subprocess.run(
        [sys.executable, "-c", PROBE, *map(str, files)], capture_output=True, text=True, timeout=300, cwd=REPO
    )
    assert run.returncode == 0, run.stderr[-3000:]
    (_, tiny), (_, small), (entries, large) = json.loads(run.stdout.splitlines()[-1])
    assert entries > 40_000  # the file is as large as it says
    assert large - small < 6, (tiny, small, large)
    assert large - tiny < 4 * 8, (tiny, small, large)
