"""envsdk: write an environment, train it with RLlib 2.60 from a YAML file."""

from envsdk import internals, moved
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
internals.connectors_find_their_caller_cheaply()  # 0.2 s less to build an algorithm or env runner
internals.polyak_updates_in_place()  # DQN's and SAC's target networks blended in place
internals.discrete_actions_skip_unsquashing()  # no copy of discrete actions at every env step
internals.optimizers_fused_on_cpu()  # torch's fused Adam for RLlib's default optimizers on CPU

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
