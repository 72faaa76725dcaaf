"""Baselines: the configs others ship (imported files) and what a deployment runs without tuning (its
files, else the serving engine's fallback rule: an op's `Fallback`, `autotune.db.formats`)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import select

from autotune.core.config import Config
from autotune.core.problem import Problem
from autotune.core.registry import rules_of
from autotune.core.result import Source, TrialStatus
from autotune.core.target import Target

from .database import Database
from .formats import Fallback, parts
from .models import GpuModel, KernelModel, ProblemModel, TrialModel

__all__ = ["Baselines", "deployment_configs"]


def deployment_configs(
    imported: Mapping[int, Config], problem: Problem, target: Target, ms: Iterable[int]
) -> tuple[dict[int, Config], str]:
    """What a deployment on `target` runs for `problem`'s shape, by M key, and where it comes from:
    `imported` (the files imported for that device) where there are any ("file"), else the first of the
    ops' fallback rules (`Fallback`: vLLM's fused-MoE rule) that covers the problem, at `ms`, and its
    name ("vLLM fallback"); ({}, "") where none applies."""
    if imported:
        return dict(imported), "file"
    for fallback in parts(Fallback):
        found = fallback.configs(problem, target, ms)
        if found:
            return found, fallback.source
    return {}, ""


class Baselines(Database):
    """The configs imported for a shape (vLLM's, SGLang's and aiter's files), what a vLLM deployment runs
    for it (those files, else vLLM's fallback rule), and the configs worth trying first when tuning it
    (warm starts). An imported config of a problem's op's `unknown_twin` (a fused MoE's vLLM file whose K
    and top-k were unknown) counts for every problem of that family. Read-only."""

    def imported_configs(
        self, problem: Problem, *, device_key: str | None, kernel: str | None = None
    ) -> dict[int, Config]:
        """The configs imported for `problem`'s shape (any M: vLLM's, SGLang's and aiter's files), by the M
        they were imported for; the newest import of an M wins. With `device_key`, only the files of that
        device (`Target.device_key`: an H100's file does not speak for an H200, where vLLM would run its
        own file or its fallback); None takes every device's. With `kernel`, only the configs stored under
        that kernel name (one project's files, as the format's reader names them). An imported config of the
        problem's `unknown_twin` counts for it. Empty where nothing was imported for the shape."""
        t, p = TrialModel, ProblemModel
        same = _same_shape(problem, imported=True)
        stmt = (
            select(p.m, t.config_json, GpuModel.target_json)
            .join(p, t.problem_id == p.id)
            .join(GpuModel, t.gpu_id == GpuModel.id)
            .where(
                p.op == problem.op,
                p.n == problem.N,
                same,
                t.status == TrialStatus.OK.value,
                t.source == Source.IMPORTED.value,
            )
            .order_by(t.id)
        )
        if kernel is not None:
            stmt = stmt.join(KernelModel, t.kernel_id == KernelModel.id).where(KernelModel.name == kernel)
        with self._session() as session:
            rows = session.execute(stmt).all()
        keys: dict[str, str] = {}  # target JSON → its device key, once per GPU row

        def on_device(target_json: str) -> bool:
            if device_key is None:
                return True
            if target_json not in keys:
                keys[target_json] = Target.from_dict(json.loads(target_json)).device_key()
            return keys[target_json] == device_key

        return {int(m): Config.from_json(text) for m, text, target_json in rows if on_device(target_json)}

    def baseline_configs(self, problem: Problem, target: Target, ms: Iterable[int]) -> dict[int, Config]:
        """What a deployment on `target` runs for `problem`'s shape, by M key: the files imported for its
        device (`imported_configs`), else the serving engine's fallback rule at each M of `ms` (vLLM's for
        a fused MoE: `deployment_configs`); empty where neither applies."""
        imported = self.imported_configs(problem, device_key=target.device_key())
        return deployment_configs(imported, problem, target, ms)[0]

    def known_configs(self, problem: Problem, *, fingerprint: str | None, limit: int = 3) -> list[Config]:
        """Configs worth trying first when tuning `problem`, best guesses first: the imported config of the
        nearest M of the same shape (vLLM's and aiter's files, as vLLM picks a bucket), then the winners
        measured on the GPU `fingerprint` names for the same shape at other M, nearest M (on a log scale)
        first; at most `limit` measured ones, no config twice. Empty where nothing of the shape is known.
        An imported config of the problem's `unknown_twin` counts for it."""
        t, p = TrialModel, ProblemModel
        is_imported = t.source == Source.IMPORTED.value
        same = _same_shape(problem, imported=is_imported)
        stmt = (
            select(p.m, t.source, t.gpu_id, t.time_us, t.config_json)
            .join(p, t.problem_id == p.id)
            .where(
                p.op == problem.op,
                p.n == problem.N,
                same,
                t.status == TrialStatus.OK.value,
                # vLLM's files carry no times: an imported config counts untimed
                is_imported | ((t.source == Source.MEASURED.value) & t.time_us.is_not(None)),
            )
        )
        gpu_ids = self._match_gpus(fingerprint)
        best: dict[tuple[str, int], tuple[float, str]] = {}  # (source, M) -> fastest (time, config)
        with self._session() as session:
            for m, source, gpu_id, time_us, config_json in session.execute(stmt):
                measured = source == Source.MEASURED.value
                if measured and (m == problem.M or (gpu_ids is not None and gpu_id not in gpu_ids)):
                    continue
                key, us = (source, int(m)), float(time_us or 0.0)  # measured ones are all timed
                if key not in best or us < best[key][0]:
                    best[key] = (us, config_json)

        def by_distance(source: str) -> list[str]:
            ms = sorted((m for s, m in best if s == source), key=lambda m: (abs(math.log(m / problem.M)), m))
            return [best[(source, m)][1] for m in ms]

        imported = by_distance(Source.IMPORTED.value)[:1]
        out: list[Config] = []
        for text in imported + by_distance(Source.MEASURED.value)[:limit]:
            config = Config.from_json(text)
            if config not in out:
                out.append(config)
        return out


def _same_shape(problem: Problem, *, imported: Any) -> Any:
    """The SQL condition of a stored problem of `problem`'s shape at any M (its K and params), given op
    and N; also its op's `unknown_twin` (`ProblemRules.unknown_twin`), where `imported` (True, or a
    condition on the trial) holds."""
    p = ProblemModel
    same = (p.k == problem.K) & (p.params == problem.params_json())
    twin = rules_of(problem.op).unknown_twin(problem)
    if twin is not None:
        unknown = (p.k == twin.K) & (p.params == twin.params_json())
        same = same | (unknown if imported is True else imported & unknown)
    return same
