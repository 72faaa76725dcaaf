"""What the importers of other projects' tuned configs share (`autotune.db.interop`, the readers of the
database's own and those of the ops, `autotune.db.formats`): their errors, the Target of a device name,
the source hash of imported trials, and `ImportedFile`, what one file holds.

Imported results are never mixed with measured ones: they are stored with source "imported" under a
Target whose toolchain is ``{"source": "imported"}``, so its fingerprint never equals a local GPU's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from autotune.core.result import TrialStatus
from autotune.core.target import Target, part_limits

from .store import NewTrial

__all__ = [
    "IMPORTED_SOURCE_HASH",
    "IMPORTED_TOOLCHAIN",
    "JSON_PROJECTS",
    "PROJECTS",
    "Found",
    "ImportedFile",
    "InteropError",
    "JsonForm",
    "device_name_of",
    "device_target",
]

#: The toolchain of every imported Target: its fingerprint never equals a locally measured GPU's.
IMPORTED_TOOLCHAIN: dict[str, str] = {"source": "imported"}
#: The projects imported files come from (a record's ``imported_from``), those that ship vLLM-style
#: fused-MoE config files first.
PROJECTS: tuple[str, ...] = ("vllm", "sglang", "aiter", "tunableop")
#: The projects whose files are vLLM-style fused-MoE config files (JSON).
JSON_PROJECTS: tuple[str, ...] = ("vllm", "sglang", "aiter")
#: The kernel source hash of imported trials where our own kernel's cannot be had.
IMPORTED_SOURCE_HASH = "imported"


class InteropError(ValueError):
    """A file that cannot be imported, or winners that cannot be exported; the message names the file
    (and the key or row) and says what is wrong."""


# -- devices -----------------------------------------------------------------------------------------------

#: Device-name parts we know, first match wins: (part, arch, fields that differ from the arch's flagship).
_DEVICES: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("H100 PCIe", "sm_90", {"cu_count": 114}),
    ("H100", "sm_90", {}),
    ("H200", "sm_90", {}),
    ("MI308X", "gfx942", {"cu_count": 80}),
    ("MI300X", "gfx942", {}),
    ("MI325X", "gfx942", {}),
    ("MI355X", "gfx950", {}),
    ("MI350X", "gfx950", {}),
)


def device_target(device_name: str) -> Target:
    """The Target of a vLLM device name (``torch.cuda.get_device_name()`` with spaces as ``_``).

    Named after the device (underscores back to spaces), with the published limits of its arch (H100 and
    H200: sm_90; MI300X, MI325X and MI308X: gfx942; MI355X and MI350X: gfx950), toolchain
    `IMPORTED_TOOLCHAIN` and `present` False. Raises InteropError for a device it does not know.
    """
    name = " ".join(device_name.replace("_", " ").split())
    for part, arch, fixed in _DEVICES:
        if part in name:
            fields = part_limits(arch, name)
            fields.update(fixed, name=name)
            return Target(arch=arch, toolchain=dict(IMPORTED_TOOLCHAIN), present=False, **fields)
    known = ", ".join(part for part, _, _ in _DEVICES)
    raise InteropError(f"unknown device {device_name!r}: known devices contain one of {known}")


def device_name_of(target: Target) -> str:
    """The vLLM device name of `target`: its name with spaces as underscores."""
    return "_".join(target.name.split())


@dataclass(frozen=True)
class ImportedFile:
    """What one file holds, ready to be written: its trials, and why some entries are flagged or skipped.

    Flagged entries are among `trials`, stored with status pruned (or wrong_result) and the reason as
    their error; skipped entries (a quantization or MLP variant our problems cannot express, an entry
    that is no config or holds a value out of bounds) are not stored at all. `error` is why the whole
    file was skipped ("" when it was read); `readable` is False when it could not be read at all, and
    `all_bad` True when it was read but every entry it has is bad (no config, or out of bounds): both
    fail an import as much. `project` is the project the file came from (`PROJECTS`), `warnings` what
    its import should say besides (shape flags that disagree with the file, configs that conflict with
    another project's file of the same name). `written` is None until `import_files` has written the
    trials, then how many were new.
    """

    path: Path
    format: str  # "vllm", "aiter" or "tunableop"
    summary: str
    trials: tuple[NewTrial, ...]
    flagged: tuple[tuple[str, str], ...] = ()  # (entry, reason)
    skipped: tuple[tuple[str, str], ...] = ()  # (entry, reason)
    written: int | None = None
    error: str = ""
    readable: bool = True
    #: (ok, flagged) trials of a file written as it was read (streamed: `trials` is then empty).
    streamed: tuple[int, int] | None = None
    all_bad: bool = False
    project: str = ""
    warnings: tuple[str, ...] = ()
    #: (skipped, flagged) entries beyond those listed (a reader lists `Found.NOTES_KEPT` of each).
    more: tuple[int, int] = (0, 0)

    @property
    def failed(self) -> bool:
        """Whether the file failed its import: unreadable, or every entry bad."""
        return not self.readable or self.all_bad

    @property
    def n_trials(self) -> int:
        return len(self.trials) if self.streamed is None else sum(self.streamed)

    @property
    def n_entries(self) -> int:
        return self.n_trials + len(self.skipped) + self.more[0]

    @property
    def n_ok(self) -> int:
        if self.streamed is not None:
            return self.streamed[0]
        return sum(1 for t in self.trials if t.result.status is TrialStatus.OK)

    @property
    def n_flagged(self) -> int:
        if self.streamed is not None:
            return self.streamed[1]
        return sum(1 for t in self.trials if t.result.status is not TrialStatus.OK)


@dataclass
class Found:
    """What a streaming reader found besides the trials it yields, filled in as it reads: the entries it
    flagged or skipped (with the reason; the first `NOTES_KEPT` of each listed, the others counted, so
    that a file of a million bad entries takes no more memory than one of a thousand), how many of the
    skipped ones were bad (no config, a value out of bounds: not merely a variant no op of ours holds),
    how many trials it yielded of each status, what it warns of, the project the file comes from, and,
    once it is done, the file's summary."""

    #: Flagged and skipped entries listed, each; those beyond are counted.
    NOTES_KEPT = 1000

    flagged: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    n_ok: int = 0
    n_flagged: int = 0
    summary: str = ""
    n_bad: int = 0
    first_bad: tuple[str, str] | None = None
    warnings: list[str] = field(default_factory=list)
    project: str = ""
    more_skipped: int = 0
    more_flagged: int = 0

    def skip(self, entry: str, reason: str) -> None:
        """Skips `entry` (a variant no op of ours holds), with the reason."""
        if len(self.skipped) < self.NOTES_KEPT:
            self.skipped.append((entry, reason))
        else:
            self.more_skipped += 1

    def bad(self, entry: str, reason: str) -> None:
        """Skips the bad `entry` (no config, or a value out of bounds), with the reason."""
        self.skip(entry, reason)
        self.n_bad += 1
        if self.first_bad is None:
            self.first_bad = (entry, reason)

    def flag(self, entry: str, reason: str) -> None:
        """Notes the flagged `entry` (stored, pruned or a wrong result), with the reason."""
        if len(self.flagged) < self.NOTES_KEPT:
            self.flagged.append((entry, reason))
        else:
            self.more_flagged += 1

    def unflag(self, entry: str) -> None:
        """Takes back the note of the flagged `entry`, the last one noted."""
        if self.more_flagged:
            self.more_flagged -= 1
        elif self.flagged and self.flagged[-1][0] == entry:
            self.flagged.pop()

    def count(self, trial: NewTrial) -> NewTrial:
        """`trial`, counted by its status."""
        if trial.result.status is TrialStatus.OK:
            self.n_ok += 1
        else:
            self.n_flagged += 1
        return trial

    def file(self, path: Path, format: str, trials: Iterable[NewTrial]) -> ImportedFile:
        """The ImportedFile of `path` holding `trials` (every trial the reader yielded)."""
        kept = tuple(trials)
        return ImportedFile(
            path, format, self.summary, kept, tuple(self.flagged), tuple(self.skipped),
            project=self.project or format, warnings=tuple(self.warnings), more=self.more,
        )  # fmt: skip

    @property
    def more(self) -> tuple[int, int]:
        """(skipped, flagged) entries beyond those listed."""
        return self.more_skipped, self.more_flagged

    def all_bad(self, path: Path) -> str:
        """Why the file `path` is not imported where it has entries and every one is bad (`bad`); ""
        where some entry was read (or only variants were skipped)."""
        if self.n_ok or self.n_flagged or self.first_bad is None:
            return ""
        entry, why = self.first_bad
        others = len(self.skipped) + self.more_skipped - self.n_bad
        also = f", {others} of a variant not modelled" if others > 0 else ""
        return f"{path}: no entry could be imported: {self.n_bad} bad{also} (first: {entry}: {why})"


class JsonForm:
    """`json.dumps(value, sort_keys=True)` (a trial's extra as the Store writes it) of values alike but in
    a few strings and integers: a sample is encoded once, with a `slot` marking each place that differs,
    and `text` fills those places in for one value (as `json.dumps` encodes them)."""

    def __init__(self, sample: Any) -> None:
        parts = _SLOT.split(json.dumps(sample, sort_keys=True))
        self._format = "%s".join(p.replace("%", "%%") for p in parts[0::2])
        self._slots = tuple(int(i) for i in parts[1::2])

    @staticmethod
    def slot(index: int) -> str:
        """The marker of the place of the `index`-th value `text` fills in (a text with NUL characters,
        which no CSV file holds)."""
        return f"\x00{index}\x00"

    def text(self, values: Sequence[str | int]) -> str:
        """The JSON of the value whose slots hold `values` (by index): strings and integers (not bools)."""
        return self._format % tuple(
            [
                encode_basestring_ascii(value) if isinstance(value, str) else int.__repr__(value)
                for value in map(values.__getitem__, self._slots)
            ]
        )


#: A slot in a sample's JSON: its marker (`JsonForm.slot`) as a JSON string.
_SLOT = re.compile(r'"\\u0000(\d+)\\u0000"')
