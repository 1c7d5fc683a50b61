"""A custom ModelV2 in the style of the Ray 1.x tutorials (old API stack).

Used with ``custom_model: customnet``; ``custom_model_config`` entries
(``hidden_size``, ``activation``) arrive as constructor keyword arguments.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.models.torch.torch_modelv2 import TorchModelV2
from torch import nn

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU}


class CustomModel(TorchModelV2, nn.Module):
    """Separate policy and value MLPs."""

    def __init__(
        self,
        obs_space: gym.Space,
        action_space: gym.Space,
        num_outputs: int,
        model_config: dict,
        name: str,
        hidden_size: int = 64,
        activation: str = "tanh",
    ) -> None:
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        inputs = int(np.prod(obs_space.shape or ()))
        act = ACTIVATIONS[activation]
        self.policy = nn.Sequential(
            nn.Linear(inputs, hidden_size), act(), nn.Linear(hidden_size, num_outputs)
        )
        self.value = nn.Sequential(nn.Linear(inputs, hidden_size), act(), nn.Linear(hidden_size, 1))
        self._features: torch.Tensor | None = None

    def forward(self, input_dict, state, seq_lens):
        self._features = input_dict["obs_flat"].float()
        return self.policy(self._features), state

    def value_function(self):
        return self.value(self._features).squeeze(-1)
