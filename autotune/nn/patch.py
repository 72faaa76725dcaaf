"""`patch(model)`: swaps a model's `nn.Linear` layers and its Mixtral and Qwen3-MoE sparse MoE blocks, in
place, for the modules of `autotune.nn`, and reports what it swapped and why it left the rest."""

from __future__ import annotations

import fnmatch
import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from autotune.nn.hf import moe_block_family
from autotune.nn.linear import Linear, LinearWeights
from autotune.nn.moe import FusedMoE, MoeWeights

__all__ = ["Left", "NameFilter", "PatchReport", "patch"]

log = logging.getLogger(__name__)

#: Names to match: a glob pattern (`fnmatch`, where `*` crosses dots), several, or a predicate on the name.
NameFilter = str | Sequence[str] | Callable[[str], bool]


@dataclass(frozen=True)
class Left:
    """A layer `patch` left as it was (an `nn.Linear` or a sparse MoE block), and why."""

    name: str
    reason: str


@dataclass(frozen=True)
class PatchReport:
    """What `patch` did: the qualified names of the modules it swapped, in model order, and each layer it
    left with its reason."""

    swapped: tuple[str, ...]
    left: tuple[Left, ...]

    def reason(self, name: str) -> str | None:
        """Why the layer `name` was left; None where it was not (swapped, or not a layer)."""
        return next((entry.reason for entry in self.left if entry.name == name), None)

    def __str__(self) -> str:
        lines = [f"swapped {len(self.swapped)} layers, left {len(self.left)}"]
        lines += [f"  left {entry.name}: {entry.reason}" for entry in self.left]
        return "\n".join(lines)


def _matcher(names: NameFilter | None, what: str) -> Callable[[str], bool] | None:
    if names is None:
        return None
    if callable(names):
        return names
    patterns = (names,) if isinstance(names, str) else tuple(names)
    if not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{what} takes glob patterns (str) or a callable on the name, got {names!r}")
    return lambda name: any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _home(model: nn.Module) -> torch.device | None:
    """The device holding most of the model's parameter elements (None: no parameters)."""
    counts: Counter[torch.device] = Counter()
    for p in model.parameters():
        counts[p.device] += p.numel()
    return counts.most_common(1)[0][0] if counts else None


class _Patcher:
    def __init__(
        self,
        include: Callable[[str], bool] | None,
        exclude: Callable[[str], bool] | None,
        linear_weights: LinearWeights | None,
        moe: bool,
        moe_weights: MoeWeights | None,
        home: torch.device | None,
    ) -> None:
        self.include, self.exclude = include, exclude
        self.linear_weights, self.moe, self.moe_weights = linear_weights, moe, moe_weights
        self.home = home
        self.swapped: list[str] = []
        self.left: list[Left] = []
        self.done: dict[int, nn.Module] = {}  # a module reached twice (shared) gets one replacement

    def _common(self, name: str, module: nn.Module) -> str | None:
        """Why `module` is left whatever its kind: its name, hooks or device; None where none of them."""
        if self.include is not None and not self.include(name):
            return "not included by name"
        if self.exclude is not None and self.exclude(name):
            return "excluded by name"
        if module._forward_hooks or module._forward_pre_hooks:
            return "it has forward hooks, which a swap would drop"
        devices = {p.device for p in module.parameters()} | {b.device for b in module.buffers()}
        off = sorted(str(d) for d in devices if d != self.home)
        if off:
            return f"weights on {', '.join(off)}, the rest of the model on {self.home}"
        return None

    def _leave_inside(self, name: str, block: nn.Module, why: str | None) -> None:
        """Reports the router of MoE block `name` (and, where the block is left for `why`, its Linears)."""
        router = f"{name}.gate"
        for sub, module in block.named_modules(prefix=name):
            if sub == router and why is None:
                self.left.append(Left(sub, f"the router of {name}, which is swapped whole (FusedMoE routes)"))
            elif why is not None and sub != name and (sub == router or isinstance(module, nn.Linear)):
                role = "the router" if sub == router else "a layer"
                self.left.append(Left(sub, f"{role} of {name}, which is left whole ({why})"))

    def block(self, name: str, module: nn.Module) -> nn.Module:
        why = "moe=False" if not self.moe else self._common(name, module)
        if why is None:
            try:
                swap = FusedMoE.from_block(module, weights=self.moe_weights)
            except ValueError as exc:
                why = str(exc)
            else:
                self.swapped.append(name)
                self._leave_inside(name, module, None)
                return swap
        self.left.append(Left(name, why))
        self._leave_inside(name, module, why)
        return module

    def linear(self, name: str, module: nn.Module) -> nn.Module:
        if type(module) is not nn.Linear:
            subclass = f"a subclass of nn.Linear ({type(module).__name__}): its forward may differ"
            self.left.append(Left(name, subclass))
            return module
        why = self._common(name, module)
        if why is None:
            try:
                swap = Linear.from_linear(module, weights=self.linear_weights)
            except ValueError as exc:
                why = str(exc)
            else:
                self.swapped.append(name)
                return swap
        self.left.append(Left(name, why))
        return module

    def visit(self, prefix: str, parent: nn.Module) -> None:
        for child_name, child in list(parent._modules.items()):  # named_children() skips repeats
            if child is None:
                continue
            name = f"{prefix}.{child_name}" if prefix else child_name
            if id(child) in self.done:
                setattr(parent, child_name, self.done[id(child)])
                continue
            if moe_block_family(child) is not None:
                swap = self.block(name, child)
            elif isinstance(child, nn.Linear):
                swap = self.linear(name, child)
            else:
                self.visit(name, child)
                continue
            self.done[id(child)] = swap
            if swap is not child:
                setattr(parent, child_name, swap)


def patch(
    model: nn.Module,
    *,
    include: NameFilter | None = None,
    exclude: NameFilter | None = None,
    linear_weights: LinearWeights | None = None,
    moe: bool = True,
    moe_weights: MoeWeights | None = None,
) -> PatchReport:
    """Swaps, in place, `model`'s `nn.Linear` layers for `autotune.nn.Linear` and its Mixtral and
    Qwen3-MoE sparse MoE blocks (transformers 4.x or 5.x) for `autotune.nn.FusedMoE`; returns the report.

    Rules:
    - A layer is swapped only where its qualified name (`model.named_modules()`'s) matches `include`
      (None: every name) and not `exclude`: glob patterns (`fnmatch`, `*` crosses dots) or a callable
      on the name. An MoE block is matched by its own name and swapped or left whole: the router and
      experts inside it are never swapped on their own.
    - `linear_weights` ("fp8_rowwise", "fp8_blockwise") quantizes the swapped Linears' weights once;
      `moe_weights` ("fp8_blockwise") the experts'; `moe=False` leaves the MoE blocks.
    - Left, each with its reason: what the modules refuse to serve (float32, K or N the kernels refuse,
      such as blockwise FP8 with K not a multiple of 128), weights on another device than most of the
      model's, a module with forward hooks, a subclass of nn.Linear, the router of every MoE block
      (swapped with its block, or left with it) and the Linears inside a block that is left.
    - Swapped modules share the bf16/fp16 tensors of the layers they replace (ties kept); FP8 ones hold
      their own. A module reached under two names is swapped once.
    """
    if linear_weights is not None and linear_weights not in ("fp8_rowwise", "fp8_blockwise"):
        raise ValueError(
            f"linear_weights must be None, 'fp8_rowwise' or 'fp8_blockwise', got {linear_weights!r}"
        )
    if moe_weights is not None and moe_weights != "fp8_blockwise":
        raise ValueError(f"moe_weights must be None or 'fp8_blockwise', got {moe_weights!r}")
    include_, exclude_ = _matcher(include, "include"), _matcher(exclude, "exclude")
    patcher = _Patcher(include_, exclude_, linear_weights, moe, moe_weights, _home(model))
    if moe_block_family(model) is not None or isinstance(model, nn.Linear):
        raise ValueError("patch swaps the layers inside a model; wrap a single layer yourself (autotune.nn)")
    patcher.visit("", model)
    report = PatchReport(tuple(patcher.swapped), tuple(patcher.left))
    log.info("autotune.patch: swapped %d layers, left %d", len(report.swapped), len(report.left))
    for entry in report.left:
        log.debug("autotune.patch left %s: %s", entry.name, entry.reason)
    return report
