"""envsdk: write an environment, train it with RLlib 2.60 from a YAML file."""

from envsdk.base import (
    MASK_KEY,
    OBS_KEY,
    ActionMaskEnv,
    CurriculumEnv,
    Env,
    MultiAgentEnv,
    TaskSettable,
)
from envsdk.registry import register

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
