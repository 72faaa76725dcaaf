"""What the compile pool's fork server loads once (Linux): each compile process, a fork of the server,
starts with it in memory instead of loading it at its first compile.

Imported for this side effect only (`autotune.engine.compile.PRELOAD`): the op plug-ins and their
kernels, Triton's compiler and its backends and Triton's own key (a hash of its files that every compile
looks up). Nothing here may start a thread: the server forks (torch's meta kernels, which pull in
torch._dynamo, do start threads, so recording a launch is left to the compile processes).
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil

from autotune.core.registry import PLUGINS, load_plugins

with contextlib.suppress(Exception):
    load_plugins()


def _package_modules(name: str) -> list[str]:
    """Every module of the plug-in package `name`."""
    with contextlib.suppress(Exception):
        package = importlib.import_module(name)
        found = pkgutil.walk_packages(getattr(package, "__path__", []), prefix=f"{name}.")
        return [m.name for m in found]
    return []


#: Every module of the op plug-ins' packages, then Triton's compiler and its backends.
MODULES = (
    *(m for name in PLUGINS for m in _package_modules(name)),
    "triton.compiler.compiler",
    "triton.backends.nvidia.compiler",
    "triton.backends.amd.compiler",
)

# Nothing here may fail either: an exception would stop the fork server, and with it every compile.
for _name in MODULES:
    with contextlib.suppress(Exception):  # e.g. a backend this Triton lacks
        importlib.import_module(_name)

for _name in ("triton.runtime.cache", "triton.compiler.compiler"):  # where it lives, by release
    with contextlib.suppress(Exception):
        _key = getattr(importlib.import_module(_name), "triton_key", None)
        if _key is not None:
            _key()
            break
