"""envsdk: write an environment, train it with RLlib 2.60 from a YAML file."""

from envsdk import moved
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

moved.install()  # checkpoints from before the sub-packages name our classes by their old paths

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
