"""`object_members`, the chunked reader of one large JSON object: what `json.loads` reads, member by member,
at any chunk size, and the same errors, at the same line and column."""

from __future__ import annotations

import io
import json
import random
from typing import Any

import pytest

from autotune.db.json_members import JsonError, NotAnObject, object_members


def members(text: str, chunk: int, max_value: int = 10_000) -> list[tuple[str, Any]]:
    return list(object_members(io.StringIO(text).read, chunk=chunk, max_value=max_value))


def random_doc(rng: random.Random) -> dict[str, Any]:
    values: list[Any] = [
        {"a": rng.randrange(-(10**15), 10**15), "b": [1.5e10, None, True], "c": 'x"\\y\n\u00e9\U0001f600'},
        12345678901234567890,
        -1.25e-7,
        "s",
        False,
        None,
        [],
        {},
        0,
        -0.5,
    ]
    return {
        str(rng.randrange(1, 10 ** rng.randrange(1, 12))): rng.choice(values)
        for _ in range(rng.randrange(30))
    }


@pytest.mark.parametrize("seed", range(40))
def test_members_are_what_json_loads_reads_at_any_chunk_size(seed: int) -> None:
    rng = random.Random(seed)
    doc = random_doc(rng)
    text = json.dumps(doc, indent=rng.choice([None, 0, 4]), ensure_ascii=rng.random() < 0.5)
    for chunk in (1, 2, 3, 7, 64, 1 << 20):
        assert dict(members(text, chunk)) == doc, chunk
        assert [k for k, _ in members(text, chunk)] == list(doc)  # in the file's order


BAD = [
    '{"a": 1,}',
    '{"a" 1}',
    '{"a": 1 "b": 2}',
    '{"a": tru}',
    '{"a": 1}x',
    "",
    "   ",
    "{",
    '{"a":',
    '{"a": 1',
    '{"a": {"b": }}',
    '{\n  "a": 1,\n  "b": 2,\n  x\n}',
    '{"a": 1}\n\n  {}',
    "{1: 2}",
    "nul",
    '{"a": 1.5e}',
    '{"a": -}',
    '{"a": 01}',
    '{"a": "x\ny"}',
]


@pytest.mark.parametrize("text", BAD)
def test_errors_are_json_loads_own_at_its_line_and_column(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as ref:
        json.loads(text)
    for chunk in (1, 2, 5, 100):
        with pytest.raises(JsonError) as got:
            members(text, chunk)
        assert (got.value.msg, got.value.line, got.value.column) == (ref.value.msg, ref.value.lineno,
                                                                     ref.value.colno), chunk  # fmt: skip


@pytest.mark.parametrize("text", ["[1, 2]", '"s"', "12", "null"])
def test_json_of_another_value_is_no_object(text: str) -> None:
    with pytest.raises(NotAnObject):
        members(text, 2)


def test_a_value_longer_than_the_bound_is_an_error_not_a_read_of_it_all() -> None:
    text = '{"1": {"a": 1}, "2": "' + "x" * 50_000 + '"}'
    with pytest.raises(JsonError, match="a value of more than 1000 characters"):
        members(text, 64, max_value=1000)
    assert members('{"1": "' + "x" * 900 + '"}', 64, max_value=1000)[0][1] == "x" * 900
