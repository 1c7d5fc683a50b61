"""A PPO RLModule for games with several observations per agent (Unity-style).

Used with ``custom_model: dodgenet`` (configs/unity-dodgeball.yaml).  Every
image observation (H, W, C) goes through a small conv encoder, every vector
one is flattened; the features are joined and feed the policy and value
heads.  Observations ``{"observations": ..., "action_mask": m}`` get their
forbidden actions masked.  Discrete, multi-discrete (Unity branches) and
continuous (Box) actions.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.distribution.torch.torch_distribution import TorchDiagGaussian, TorchMultiCategorical
from ray.rllib.core.rl_module.apis.value_function_api import ValueFunctionAPI
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn

from envsdk.envs.base import MASK_KEY, OBS_KEY


def _parts(space: gym.Space) -> dict[str, gym.Space]:
    if isinstance(space, gym.spaces.Dict):
        return dict(space.spaces)
    return {"obs": space}


class DodgeNet(TorchRLModule, ValueFunctionAPI):
    default_model_config = {"hidden": 64, "channels": 8}

    def setup(self) -> None:
        options = self.model_config if isinstance(self.model_config, dict) else {}
        cfg = {**self.default_model_config, **options}
        space, act = self.observation_space, self.action_space
        assert space is not None and act is not None, "RLlib gives a module its spaces"
        self.masked = isinstance(space, gym.spaces.Dict) and MASK_KEY in space.spaces
        inner = space[OBS_KEY] if isinstance(space, gym.spaces.Dict) and self.masked else space
        self.names = list(_parts(inner))
        encoders: dict[str, nn.Module] = {}
        width = 0
        for name, sub in _parts(inner).items():
            shape = sub.shape or ()
            if len(shape) == 3:
                h, w, c = shape
                ch = cfg["channels"]
                conv = nn.Sequential(
                    nn.Conv2d(c, ch, 3, stride=2, padding=1), nn.ReLU(),
                    nn.Conv2d(ch, ch, 3, stride=2, padding=1), nn.ReLU(), nn.Flatten(),
                )  # fmt: skip
                with torch.no_grad():
                    width += conv(torch.zeros(1, c, h, w)).shape[1]
                encoders[name] = conv
            else:
                encoders[name] = nn.Flatten()
                width += int(np.prod(shape))
        self.encoders = nn.ModuleDict(encoders)
        self.body = nn.Sequential(nn.Linear(width, cfg["hidden"]), nn.Tanh())
        if isinstance(act, gym.spaces.Box):
            outputs = 2 * int(np.prod(act.shape))
        elif isinstance(act, gym.spaces.Discrete):
            outputs = int(act.n)
        elif isinstance(act, gym.spaces.MultiDiscrete):
            outputs = int(np.sum(act.nvec))
        else:
            raise ValueError(f"DodgeNet acts in Box, Discrete or MultiDiscrete spaces, not {act}")
        self.pi = nn.Linear(cfg["hidden"], outputs)
        self.vf = nn.Linear(cfg["hidden"], 1)

    def get_inference_action_dist_cls(self) -> Any:
        if isinstance(self.action_space, gym.spaces.MultiDiscrete):
            return TorchMultiCategorical.get_partial_dist_cls(  # type: ignore[misc]  # RLlib's annotation
                input_lens=[int(n) for n in self.action_space.nvec]
            )
        if isinstance(self.action_space, gym.spaces.Box):
            return TorchDiagGaussian
        return super().get_inference_action_dist_cls()

    def _features(self, batch: dict[str, Any]) -> torch.Tensor:
        obs = batch[Columns.OBS]
        inner = obs[OBS_KEY] if self.masked else obs
        values = inner if isinstance(inner, dict) else {"obs": inner}
        feats = []
        for name in self.names:
            x = values[name].float()
            if x.dim() == 4:
                x = x.permute(0, 3, 1, 2)  # HWC -> CHW
            feats.append(self.encoders[name](x))
        return self.body(torch.cat(feats, dim=1))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        logits = self.pi(self._features(batch))
        if self.masked:
            mask = batch[Columns.OBS][MASK_KEY].to(torch.bool)
            logits = logits.masked_fill(mask.logical_not(), -1e9)
        return {Columns.ACTION_DIST_INPUTS: logits}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> torch.Tensor:
        return self.vf(self._features(batch)).squeeze(-1)
