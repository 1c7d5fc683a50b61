"""The default PPO model for envs with action masks.

Observations are ``{"observations": x, "action_mask": m}``; the module runs
RLlib's default PPO network on ``x`` and sets the logits of forbidden actions
to a large negative number, so neither sampling nor greedy inference picks
them.  ``train.py`` selects it automatically for such envs.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.core.columns import Columns

from envsdk.base import MASK_KEY, OBS_KEY

_NEG = -1e9


class MaskedPPOTorchRLModule(DefaultPPOTorchRLModule):
    """RLlib's default PPO module plus logit masking."""

    def __init__(self, *, observation_space: gym.spaces.Dict, **kwargs: Any):
        self.full_observation_space = observation_space
        super().__init__(observation_space=observation_space[OBS_KEY], **kwargs)

    def setup(self) -> None:
        super().setup()
        self.observation_space = self.full_observation_space

    @staticmethod
    def _split(batch: dict[str, Any]) -> tuple[torch.Tensor, dict[str, Any]]:
        obs = batch[Columns.OBS]
        inner = dict(batch)
        inner[Columns.OBS] = obs[OBS_KEY]
        return obs[MASK_KEY], inner

    @staticmethod
    def _mask(out: dict[str, Any], mask: torch.Tensor) -> dict[str, Any]:
        logits = out[Columns.ACTION_DIST_INPUTS]
        out[Columns.ACTION_DIST_INPUTS] = logits.masked_fill(mask.to(torch.bool).logical_not(), _NEG)
        return out

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mask, inner = self._split(batch)
        return self._mask(super()._forward(inner, **kwargs), mask)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        mask, inner = self._split(batch)
        return self._mask(super()._forward_train(inner, **kwargs), mask)

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        if isinstance(batch[Columns.OBS], dict):
            _, batch = self._split(batch)
        return super().compute_values(batch, embeddings)
