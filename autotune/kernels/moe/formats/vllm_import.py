"""Importing vLLM's and SGLang's fused-MoE config files, as `autotune.db.interop` asks it of a JSON format
(`autotune.db.formats.JsonReader`): the K and top-k shape flags give each file (`plan`), its trials
(`trials`), and the configs other projects' files of its name hold already (`held`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager as ContextManager
from pathlib import Path
from typing import IO, TYPE_CHECKING

from autotune.db.foreign import JSON_PROJECTS, Found, InteropError
from autotune.db.formats import JsonReader

from .shape import UnknownShape, infer_moe_shape, moe_source_hash
from .vllm import kernel_project, project_kernel, vllm_trials
from .vllm_names import VllmFileName

if TYPE_CHECKING:
    from autotune.core.config import Config
    from autotune.db.interop import ShapeFlag
    from autotune.db.store import NewTrial, Store

__all__ = ["VLLM_FILES", "held", "plan", "trials"]


def plan(
    files: Sequence[Path],
    k: int | None,
    topk: int | None,
    flags: Sequence[ShapeFlag],
    warn: Callable[[str], None],
) -> dict[Path, tuple[int | None, int | None, list[str]]]:
    """(K, top-k, warnings) of each vLLM-style file of `files` (by its name): the first of `flags` that
    names it, else `k` and `topk`. Warns (`warn`) when one flag set is applied to files of different E
    and N or a flag names no file, and, per file, when another flag names it too or what is given is not
    the K and top-k of the one known model its E and N are."""
    out: dict[Path, tuple[int | None, int | None, list[str]]] = {}
    shapes_of: dict[str, set[tuple[int, int]]] = {}
    for path in files:
        try:
            parts = VllmFileName.parse(path.name)
        except InteropError:
            continue
        named = [flag for flag in flags if flag.matches(path)]
        warnings: list[str] = []
        given: tuple[int | None, int | None]
        if named:
            given, what = (named[0].k, named[0].topk), str(named[0])
            for other in named[1:]:
                if (other.k, other.topk) != given:
                    warnings.append(f"--shape {other.pattern} names it too: {what} is applied")
        elif k is not None or topk is not None:
            given, what = (k, topk), " ".join(f"--{n} {v}" for n, v in (("k", k), ("topk", topk)) if v)
        else:
            continue
        shapes_of.setdefault(what, set()).add((parts.E, parts.N))
        try:
            known = infer_moe_shape(parts.E, parts.N)
        except (UnknownShape, InteropError):
            known = None
        if known is not None and given != known[:2] and None not in given:
            warnings.append(
                f"K={given[0]}, topk={given[1]} given ({what}), but E={parts.E}, N={parts.N} is the layer of "
                f"{known[2]} (K={known[0]}, topk={known[1]}): stored as given"
            )
        out[path] = (given[0], given[1], warnings)
    for flag in flags:
        if not any(flag.matches(path) for path in out):
            warn(f"--shape {flag.pattern}:{flag.k},{flag.topk} names no config file")
    for what, shapes in shapes_of.items():
        if len(shapes) > 1:
            shown = "; ".join(f"E={e},N={n}" for e, n in sorted(shapes))
            warn(
                f"{what} applied to files of {len(shapes)} different E and N ({shown}): a model has one; "
                "give K and topk per shape with --shape E=..,N=..:K,TOPK"
            )
    return out


def trials(
    path: Path,
    open_text: Callable[[], ContextManager[IO[str]]],
    found: Found,
    *,
    k: int | None,
    topk: int | None,
    source_hash: str | None,
    project: str | None,
) -> Iterator[NewTrial]:
    """The trials of a vLLM-style file (`vllm_trials`), stored under `source_hash` (default: our moe op's
    Triton kernel's, `moe_source_hash`)."""
    hash_ = source_hash or moe_source_hash("triton")
    return vllm_trials(path, open_text, found, k=k, topk=topk, source_hash=hash_, project=project)


def held(store: Store, trial: NewTrial) -> dict[str, dict[int, Config]]:
    """The configs other projects' files of the name of `trial`'s file hold in `store` (by project, then
    M): files of the same device, shape and kernel variant (`Store.imported_configs`)."""
    kernel, mine = kernel_project(trial.kernel)
    device = trial.target.device_key()
    out: dict[str, dict[int, Config]] = {}
    for project in JSON_PROJECTS:
        if project != mine:
            configs = store.imported_configs(
                trial.problem, device_key=device, kernel=project_kernel(kernel, project)
            )
            if configs:
                out[project] = configs
    return out


#: The reader of the vLLM-style config files.
VLLM_FILES = JsonReader("vllm", plan, trials, held)
