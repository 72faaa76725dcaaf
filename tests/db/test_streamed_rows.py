"""A streamed import stores what the file read whole, written through the ORM (`Store.record_many`),
stores: every column of every table (ids included where one chunk holds the file), into an empty
database and into one that holds rows already, on SQLite and on PostgreSQL."""

from __future__ import annotations

import random
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import DateTime, Table, create_engine, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from autotune.db import Store, import_files
from autotune.db.bulk import insert_rows
from autotune.db.engine import make_engine, resolve_url
from autotune.db.interop import read_imports
from autotune.db.models import Base
from autotune.db.rows import TRIAL_COLUMNS, TRIALS

HEADER = (
    "gfx,cu_num,M,N,K,bias,dtype,outdtype,scaleAB,bpreshuffle,libtype,solidx,splitK,us,kernelName,"
    "err_ratio,tflops,bw"
)
#: Row kinds: the GPU, the dtypes and flags, the kernel (OK, flagged, FP8, another GPU, skipped ones).
KINDS = (
    "gfx942,304,{m},{n},{k},False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,{s},0,{us},Cijk_{s}",
    "gfx942,304,{m},{n},{k},False,torch.float16,torch.float16,False,False,asm,{s},2,{us},_ZN5aiter{s}E",
    "gfx950,256,{m},{n},{k},False,torch.bfloat16,torch.bfloat16,False,False,triton,0,0,{us},tr% {s}",
    'gfx942,304,{m},{n},{k},True,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,{s},0,{us},b"{s}',
    "gfx942,304,{m},{n},{k},False,torch.float8_e4m3fnuz,torch.bfloat16,True,False,hipblaslt,{s},0,{us},f8",
    "gfx942,304,{m},{n},{k},False,torch.int8,torch.int8,False,False,hipblaslt,{s},0,{us},int8",
    "gfx942,228,{m},{n},{k},False,torch.bfloat16,torch.bfloat16,False,False,hipblaslt,{s},0,{us},cu",
)


def table(path: Path, rows: int, seed: int) -> Path:
    """An aiter bf16 GEMM table of `rows` rows of every kind, with times that are no time, sizes out of
    bounds and repeated rows among them."""
    rng = random.Random(seed)
    lines = [HEADER]
    for _ in range(rows):
        kind = rng.choice(KINDS)
        m = rng.choice([rng.randrange(1, 9000), rng.randrange(1, 9000), 1 << 30])
        us = rng.choice([f"{rng.uniform(1, 900):.4f}", f"{rng.uniform(1, 900):.4f}", "inf", "-1"])
        row = kind.format(
            m=m, n=rng.choice([512, 4096]), k=rng.choice([1024, 8192]), s=rng.randrange(9), us=us
        )
        lines.append(f"{row},0.0,{rng.uniform(1, 99):.2f},{rng.uniform(1, 99):.2f}")
        if rng.random() < 0.02:
            lines.append(lines[-1])  # the same row again
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def stored(url: str, *, ids: bool) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's rows, by id, without their times of writing; without `ids`, a trial names its
    problem by key and the problems are a set."""
    engine = create_engine(resolve_url(url))
    out: dict[str, list[tuple[Any, ...]]] = {}
    try:
        with engine.connect() as conn:
            for t in Base.metadata.sorted_tables:
                assert isinstance(t, Table)
                columns = [c for c in t.columns if not isinstance(c.type, DateTime)]
                out[t.name] = [tuple(r) for r in conn.execute(select(*columns).order_by(*t.primary_key))]
            if not ids:
                problems = Base.metadata.tables["problems"]
                keys = dict(conn.execute(select(problems.c.id, problems.c.key)).all())
                at = [c.name for c in Base.metadata.tables["trials"].columns].index("problem_id")
                out["trials"] = [(*r[:at], keys[r[at]], *r[at + 1 :]) for r in out["trials"]]
                out["problems"] = sorted(r[1:] for r in out["problems"])
    finally:
        engine.dispose()
    return out


def written_whole(url: str, paths: list[Path]) -> list[int]:
    """Each file of `paths` read whole and written by `record_many`, one after the other: new trials."""
    with Store(url) as store:
        return [sum(store.record_many(list(f.trials))) for f in read_imports(paths)]


def test_streamed_rows_are_those_written_whole(db_url: str, tmp_path: Path) -> None:
    first, second = (
        table(tmp_path / "a" / "bf16_tuned_gemm.csv", 1500, 1),
        table(tmp_path / "b" / "x.csv", 1500, 2),
    )
    reference = str(tmp_path / "whole.db")
    assert written_whole(reference, [first, second])[1] > 0
    with Store(db_url) as store:  # into an empty database, then into one that holds rows
        files = [import_files(store, [path])[0] for path in (first, second, first)]
    assert [f.written for f in files] == [*written_whole(str(tmp_path / "again.db"), [first, second]), 0]
    assert all(f.flagged and f.skipped for f in files[:2])
    assert stored(db_url, ids=True) == stored(reference, ids=True)


def test_streamed_rows_of_many_chunks_are_those_written_whole(db_url: str, tmp_path: Path) -> None:
    """Past one chunk (5000 trials) a streamed write numbers the problems of each chunk on their own:
    the same rows, the trials' ids and order the same."""
    path = table(tmp_path / "bf16_tuned_gemm.csv", 14000, 3)
    reference = str(tmp_path / "whole.db")
    written_whole(reference, [path])
    with Store(db_url) as store:
        (f,) = import_files(store, [path])
    assert f.written and f.written > 5000
    assert stored(db_url, ids=False) == stored(reference, ids=False)


def test_a_row_the_database_refuses_is_its_error(db_url: str) -> None:
    """A bulk insert that breaks a constraint (here a trial of no GPU) raises SQLAlchemy's error, on
    PostgreSQL's COPY as on an executemany, and writes nothing."""
    Store(db_url).close()
    row = (None, 999, 999, 999, "aiter", "{}", "0" * 16, "ok", "imported", *[1.0] * 6, 0, "imported",
           None, "", 0.0, 0.0, "{}", datetime.now(timezone.utc), "h")  # fmt: skip
    engine = make_engine(make_url(resolve_url(db_url)))
    try:
        with pytest.raises(IntegrityError), engine.begin() as conn:
            insert_rows(conn, TRIALS, TRIAL_COLUMNS, [row])
        with engine.connect() as conn:
            assert conn.execute(select(func.count()).select_from(TRIALS)).scalar() == 0
    finally:
        engine.dispose()
