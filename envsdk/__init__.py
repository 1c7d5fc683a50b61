"""envsdk: write an environment, train it with RLlib 2.60 from a YAML file.

Importing it changes nothing in Ray, RLlib or torch (the speed-ups that train.py and rollout.py
install are in :mod:`envsdk.speedups`), and imports RLlib only when a name below is first used.  It
adds one import finder, for envsdk's own module paths of earlier versions (:mod:`envsdk.moved`).
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

from envsdk import moved

moved.install()  # modules of earlier versions answered by today's, for their checkpoints
__version__ = importlib.metadata.version("envsdk")  # pyproject.toml's; CHANGELOG.md says what changed

if TYPE_CHECKING:
    from envsdk.envs.base import (
        MASK_KEY,
        OBS_KEY,
        ActionMaskEnv,
        CurriculumEnv,
        Env,
        MultiAgentEnv,
        TaskSettable,
    )
    from envsdk.envs.registry import register

_EXPORTS = {
    "MASK_KEY": "envsdk.envs.base",
    "OBS_KEY": "envsdk.envs.base",
    "ActionMaskEnv": "envsdk.envs.base",
    "CurriculumEnv": "envsdk.envs.base",
    "Env": "envsdk.envs.base",
    "MultiAgentEnv": "envsdk.envs.base",
    "TaskSettable": "envsdk.envs.base",
    "register": "envsdk.envs.registry",
}

__all__ = [
    "MASK_KEY",
    "OBS_KEY",
    "ActionMaskEnv",
    "CurriculumEnv",
    "Env",
    "MultiAgentEnv",
    "TaskSettable",
    "register",
]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'envsdk' has no attribute {name!r}")
