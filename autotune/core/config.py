"""Config: one point of a search space, a frozen mapping of parameter name to value."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["Config", "Value"]

Value = int | float | str | bool


class Config(Mapping[str, Value]):
    """Immutable, hashable mapping of parameter → value.

    The backend is a parameter like any other (``backend = "triton"`` or ``"torch"``). `canonical()` is
    one JSON form (sorted keys, no spaces) and `digest()` a stable hash of it: the key in the database.
    Values must be int, float, str or bool.
    """

    __slots__ = ("_canonical", "_digest", "_hash", "_items")

    def __init__(self, items: Mapping[str, Value] | None = None, /, **kwargs: Value) -> None:
        merged: dict[str, Value] = dict(items or {})
        merged.update(kwargs)
        for name, value in merged.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"config parameter names must be non-empty strings, got {name!r}")
            if not isinstance(value, (int, float, str, bool)):
                raise TypeError(f"config value of {name!r} must be int, float, str or bool, got {value!r}")
        self._items = dict(sorted(merged.items()))
        self._canonical = json.dumps(self._items, separators=(",", ":"), sort_keys=True)
        self._hash = hash(self._canonical)
        self._digest = ""

    @classmethod
    def of_sorted(cls, items: dict[str, Value], canonical: str) -> Config:
        """The config of `items`, already checked and sorted by name, whose canonical form the caller
        built as `canonical()` would: for a search space listing many configs of the same knobs."""
        config = cls.__new__(cls)
        config._items, config._canonical, config._hash = items, canonical, hash(canonical)
        config._digest = ""
        return config

    @classmethod
    def from_json(cls, text: str) -> Config:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"a config must be a JSON object, got {text!r}")
        return cls(data)

    def canonical(self) -> str:
        """The one JSON form: sorted keys, no whitespace."""
        return self._canonical

    def digest(self) -> str:
        """Stable 16-hex-digit hash of the canonical form (same in every process and version)."""
        if not self._digest:
            self._digest = hashlib.sha256(self._canonical.encode()).hexdigest()[:16]
        return self._digest

    @property
    def backend(self) -> str:
        return str(self._items.get("backend", "triton"))

    def replace(self, **changes: Value) -> Config:
        d = dict(self._items)
        d.update(changes)
        return Config(d)

    def to_dict(self) -> dict[str, Value]:
        return dict(self._items)

    def __getitem__(self, key: str) -> Value:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self._canonical == other._canonical
        return NotImplemented

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._items.items())
        return f"Config({inner})"

    def short(self) -> str:
        """Compact human form, e.g. ``triton BM64 BN64 BK32 G8 SK1 w4 s3``."""
        abbrev = {
            "BLOCK_M": "BM",
            "BLOCK_N": "BN",
            "BLOCK_K": "BK",
            "GROUP_M": "G",
            "BLOCK_SIZE_M": "BM",
            "BLOCK_SIZE_N": "BN",
            "BLOCK_SIZE_K": "BK",
            "GROUP_SIZE_M": "G",
            "SPLIT_K": "SK",
            "num_warps": "w",
            "num_stages": "s",
            "matrix_instr_nonkdim": "mi",
            "waves_per_eu": "wpe",
            "kpack": "kp",
            "NUM_XCDS": "xcd",
        }
        parts = [self.backend]
        parts += [f"{abbrev.get(k, k)}{v}" for k, v in self._items.items() if k != "backend"]
        return " ".join(parts)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Config, (self._items,))
