"""A custom RLModule for PPO (new API stack, the default).

Used with ``custom_model: tinynet``; ``custom_model_config`` becomes the
module's ``model_config``.  ``default_model_config`` lists the options, so a
misspelt one is reported before training starts.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn


class TinyNet(TorchRLModule, ValueFunctionAPI):
    """Policy and value heads on one shared hidden layer."""

    default_model_config = {"hidden": 64}

    def setup(self) -> None:
        options = self.model_config if isinstance(self.model_config, dict) else {}
        cfg = {**self.default_model_config, **options}
        obs, act = self.observation_space, self.action_space
        if not isinstance(obs, gym.spaces.Box) or not isinstance(act, gym.spaces.Discrete):
            raise ValueError(f"TinyNet takes a Box observation and Discrete actions, not {obs} and {act}")
        self.body = nn.Sequential(nn.Linear(int(np.prod(obs.shape)), cfg["hidden"]), nn.Tanh())
        self.pi = nn.Linear(cfg["hidden"], int(act.n))
        self.vf = nn.Linear(cfg["hidden"], 1)

    def _features(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.body(batch[Columns.OBS].float().flatten(1))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.pi(self._features(batch))}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.vf(self._features(batch)).squeeze(-1)
