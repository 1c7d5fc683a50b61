"""Modules that moved into sub-packages stay importable under their old names.

Checkpoints written before the move pickled our classes by module path
(``envsdk.default_models.masking.MaskedPPOTorchRLModule``, ``envsdk.failures``, ...),
and users' own scripts may import ``envsdk.base``.  A finder placed first on
``sys.meta_path`` answers those old names with the module now at the new path,
the same module object, so a class keeps one identity whichever name reached it.
``envsdk.config`` and ``envsdk.evaluation`` are packages now and are not aliased.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED = {  # old name under envsdk. -> new name under envsdk.
    "yamlio": "config.yamlio",
    "legacy": "config.legacy",
    "validation": "config.validation",
    "stopping": "config.stopping",
    "experiment": "config.experiment",
    "offline": "config.offline",
    "base": "envs.base",
    "compat": "envs.compat",
    "imports": "envs.imports",
    "registry": "envs.registry",
    "env_checker": "envs.checker",
    "curriculum": "envs.curriculum",
    "plugins": "envs.plugins",
    "default_models": "envs.default_models",
    "ray_session": "cluster.ray_session",
    "slurm": "cluster.slurm",
    "callbacks": "training.callbacks",
    "failures": "training.failures",
    "interrupt": "training.interrupt",
    "observation_filter": "training.observation_filter",
    "checkpoints": "training.checkpoints",
    "resources": "training.resources",
    "in_process": "training.in_process",
    "runner": "training.tune_runner",
    "outcome": "training.outcome",
    "plots": "training.plots",
    "restore": "evaluation.restore",
    "recording": "evaluation.recording",
    "experience": "evaluation.experience",
    "onnx_export": "evaluation.onnx_export",
    "scaffold": "cli.scaffold",
}


def new_name(name: str) -> str | None:
    """The module's current dotted name, or None when ``name`` did not move."""
    package, _, rest = name.partition(".")
    head, _, tail = rest.partition(".")
    if package != "envsdk" or head not in MOVED:
        return None
    return f"envsdk.{MOVED[head]}" + (f".{tail}" if tail else "")


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.target)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was executed under its new name."""


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: object, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = new_name(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, _Alias(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
