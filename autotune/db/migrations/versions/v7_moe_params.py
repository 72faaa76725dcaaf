"""Schema version 7: the fused MoE's expert counts are its own parameters, as every op's are.

A problem's ``params`` (canonical JSON, version 4) held ``E`` and ``topk`` for every op, 0 where the op
has no experts; its key (``Problem.key``) held them as ``E=..,topk=..`` after M, N and K. Now ``E`` and
``topk`` are the moe op's own parameters: they move into ``params["extra"]`` of the problems that have
them (E or topk not 0) and leave the others, and every key loses them, a moe problem's naming them
among its own parameters after its layout, by name::

    gemm:M=16,N=64,K=64,E=0,topk=0:bf16,bf16,bf16:nk
        -> gemm:M=16,N=64,K=64:bf16,bf16,bf16:nk
    moe:M=16,N=1536,K=4096,E=128,topk=8:bf16,fp8e4m3,bf16:nk
        -> moe:M=16,N=1536,K=4096:bf16,fp8e4m3,bf16:nk:E=128,topk=8

The claims of shared sweeps name problems by their keys (``KEY`` or ``profile:KEY``): they are rewritten
the same way, so a shared sweep's finished problems stay finished. No table or column changes; every row
is kept, and its trials and static features with it (they refer to the problem by id). A new key never
equals an old one (an old key has ``,E=`` after K), so the unique keys hold throughout. The downgrade
puts both back. Text that is no key of this form (a claim of another kind) is left as it is.

Revision ID: v7_moe_params
Revises: v6_sweep_error
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable

import sqlalchemy as sa
from alembic import op

revision = "v7_moe_params"
down_revision: str | None = "v6_sweep_error"
branch_labels: str | None = None
depends_on: str | None = None
#: The schema version this revision makes (`autotune.db.models.REVISIONS`).
schema_version = 7

#: The fields of version 6's params that become own parameters: (field, parameter).
_MOVED = (("E", "E"), ("topk", "topk"))
#: A key of version 6 (after an optional prefix such as ``profile:``): sizes with E and topk, dtypes,
#: layout, and the op's own parameters where it has any.
_OLD_KEY = re.compile(
    r"(?P<head>.*?:M=\d+,N=\d+,K=\d+),E=(?P<E>\d+),topk=(?P<topk>\d+)(?P<tail>:[^:]*:[^:]*)(?::(?P<own>.*))?"
)
#: A key of version 7: sizes, dtypes, layout, own parameters.
_NEW_KEY = re.compile(r"(?P<head>.*?:M=\d+,N=\d+,K=\d+)(?P<tail>:[^:]*:[^:]*)(?::(?P<own>.*))?")
#: Rows read and written at a time.
_BATCH = 5000


def params_json(fields: dict[str, object]) -> str:
    """The canonical JSON of a problem's fields (as `Problem.params_json` writes it)."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def _by_name(items: Iterable[str]) -> list[str]:
    """The texts "NAME=VALUE" ordered by name, as a problem orders its own parameters."""
    return sorted(items, key=lambda item: item.partition("=")[0])


def new_key(key: str) -> str:
    """The version-7 form of a version-6 key (`key` itself where it is none)."""
    found = _OLD_KEY.fullmatch(key)
    if found is None:
        return key
    own = [item for item in (found["own"] or "").split(",") if item]
    own += [f"{name}={found[name]}" for _, name in _MOVED if int(found[name])]
    return found["head"] + found["tail"] + (":" + ",".join(_by_name(own)) if own else "")


def old_key(key: str) -> str:
    """The version-6 form of a version-7 key (`key` itself where it is none)."""
    if _OLD_KEY.fullmatch(key):
        return key
    found = _NEW_KEY.fullmatch(key)
    if found is None:
        return key
    items = [item for item in (found["own"] or "").split(",") if item]
    moved = {name: "0" for _, name in _MOVED}
    own = []
    for item in items:
        name, _, value = item.partition("=")
        if name in moved:
            moved[name] = value
        else:
            own.append(item)
    sizes = ",".join(f"{name}={value}" for name, value in moved.items())
    return f"{found['head']},{sizes}{found['tail']}" + (":" + ",".join(own) if own else "")


def new_params(text: str) -> str:
    """A problem's version-7 params from its version-6 params."""
    fields = json.loads(text)
    moved = {name: int(fields.pop(field, 0)) for field, name in _MOVED}
    if any(moved.values()):
        fields["extra"] = {**fields.get("extra", {}), **moved}
    return params_json(fields)


def old_params(text: str) -> str:
    """A problem's version-6 params from its version-7 params."""
    fields = json.loads(text)
    extra = dict(fields.pop("extra", {}))
    for field, name in _MOVED:
        fields[field] = int(extra.pop(name, 0))
    if extra:
        fields["extra"] = extra
    return params_json(fields)


def upgrade() -> None:
    _rewrite(new_key, new_params)
    _set_schema_version(schema_version)


def downgrade() -> None:
    _rewrite(old_key, old_params)
    _set_schema_version(schema_version - 1)


def _rewrite(key: Callable[[str], str], params: Callable[[str], str]) -> None:
    """Every problem's key and params, and every claim's item, through `key` and `params`."""
    bind = op.get_bind()
    _update(
        bind,
        'SELECT id, "key", params FROM problems WHERE id > :last ORDER BY id',
        'UPDATE problems SET "key" = :key, params = :params WHERE id = :id',
        lambda row: {"id": row["id"], "key": key(row["key"]), "params": params(row["params"])},
    )
    _update(
        bind,
        "SELECT id, item FROM claims WHERE id > :last ORDER BY id",
        "UPDATE claims SET item = :item WHERE id = :id",
        lambda row: {"id": row["id"], "item": key(row["item"])},
    )


def _update(
    bind: sa.Connection, select: str, update: str, change: Callable[[sa.RowMapping], dict[str, object]]
) -> None:
    """Reads the rows of `select` a batch at a time (by id) and writes those that `change` changes with
    `update`."""
    last = 0
    while True:
        rows = bind.execute(sa.text(select + f" LIMIT {_BATCH}"), {"last": last}).mappings().all()
        if not rows:
            return
        changed = [new for row in rows if (new := change(row)) != {k: row[k] for k in new}]
        if changed:
            bind.execute(sa.text(update), changed)
        last = rows[-1]["id"]


def _set_schema_version(version: int) -> None:
    op.execute(sa.text("UPDATE meta SET value = :v WHERE key = 'schema_version'").bindparams(v=str(version)))
