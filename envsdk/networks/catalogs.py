"""RLlib Catalogs whose encoder takes any observation space.

RLlib's default RLModules get their networks from a ``Catalog``; the one
decision that limits them to flat vectors and a few image sizes is
``Catalog._get_encoder_config``.  :class:`AnySpaceMixin` overrides just that
decision: a flat float ``Box`` still gets RLlib's own MLP encoder (so
CartPole-style runs build exactly the network they always did), every other
space gets :class:`~envsdk.networks.encoder.SpaceEncoderConfig`.  The
heads, action distributions and losses stay RLlib's.

The catalogs are named in an ``RLModuleSpec(catalog_class=...)`` next to the
algorithm's own default module class (see :mod:`envsdk.networks.choice`).
"""

from __future__ import annotations

from typing import Any, cast

import gymnasium as gym
import numpy as np
from ray.rllib.algorithms.bc.bc_catalog import BCCatalog
from ray.rllib.algorithms.dqn.dqn_catalog import DQNCatalog
from ray.rllib.algorithms.ppo.ppo_catalog import PPOCatalog
from ray.rllib.algorithms.sac.sac_catalog import SACCatalog
from ray.rllib.core.models.base import Encoder
from ray.rllib.core.models.configs import ModelConfig, RecurrentEncoderConfig

from envsdk import internals
from envsdk.envs.keys import has_action_mask
from envsdk.networks.encoder import ObsActionEncoderConfig, RecurrentSpaceEncoderConfig, SpaceEncoderConfig

Q_NETWORK = "q_network"  # envsdk's model_config key: how SAC-family critics read the action
Q_NETWORKS = {
    "streams": "RLlib's default, observation and action in two MLP streams joined by fusionnet_hiddens",
    "concat": "one MLP of fcnet_hiddens over observation and action together",
}


def rllib_encodes(space: gym.Space) -> bool:
    """Whether RLlib's own default encoder fits: a flat float Box."""
    return (
        isinstance(space, gym.spaces.Box)
        and len(space.shape) == 1
        and np.issubdtype(space.dtype, np.floating)
    )


class AnySpaceMixin:
    """Put before an RLlib Catalog class: encoders for every observation space."""

    @classmethod
    def _get_encoder_config(  # a private RLlib hook: envsdk.internals.OVERRIDDEN
        cls, observation_space: gym.Space, model_config_dict: dict, action_space: gym.Space | None = None
    ) -> ModelConfig:
        if rllib_encodes(observation_space):
            return cls._rllib_encoder_config(observation_space, model_config_dict, action_space)
        if model_config_dict.get("use_lstm"):
            # RLlib's LSTM encoder, reading the observation through our encoder (its "tokenizer")
            # where that is one tensor, through RecurrentSpaceEncoderConfig where it has parts.
            config = cls._rllib_encoder_config(observation_space, model_config_dict, action_space)
            if has_action_mask(observation_space) or isinstance(
                observation_space, gym.spaces.Dict | gym.spaces.Tuple
            ):
                return RecurrentSpaceEncoderConfig.reading_through_tokenizer(
                    cast(RecurrentEncoderConfig, config)
                )
            return config
        return SpaceEncoderConfig.from_model_config(observation_space, model_config_dict)

    @classmethod
    def _rllib_encoder_config(
        cls, observation_space: gym.Space, model_config_dict: dict, action_space: gym.Space | None
    ) -> ModelConfig:
        config: ModelConfig = super()._get_encoder_config(  # type: ignore[misc]
            observation_space=observation_space,
            model_config_dict=model_config_dict,
            action_space=action_space,
        )
        return config

    @classmethod
    def get_tokenizer_config(
        cls, observation_space: gym.Space, model_config_dict: dict, view_requirements: Any = None
    ) -> ModelConfig:
        if rllib_encodes(observation_space):
            config: ModelConfig = super().get_tokenizer_config(observation_space, model_config_dict)  # type: ignore[misc]
            return config
        return SpaceEncoderConfig.from_model_config(
            observation_space, {**model_config_dict, "use_lstm": False}
        )


VALUE_HEADS = "value_heads"  # envsdk's model_config key: one value output per reward signal, by name


class AnySpacePPOCatalog(AnySpaceMixin, PPOCatalog):
    """PPO, APPO, IMPALA (and MARWIL): RLlib's PPOCatalog with any-space encoders, and one value
    output per name in ``model_config``'s :data:`VALUE_HEADS` (ML-Agents' value head per reward
    signal; RLlib's module then returns values of shape ``(batch, heads)``)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, model_config_dict: dict):
        super().__init__(observation_space, action_space, model_config_dict)
        heads = model_config_dict.get(VALUE_HEADS)
        if heads:
            self.vf_head_config.output_layer_dim = len(heads)


class AnySpaceDQNCatalog(AnySpaceMixin, DQNCatalog):
    """DQN: RLlib's DQNCatalog with any-space encoders."""


class AnySpaceSACCatalog(AnySpaceMixin, SACCatalog):
    """SAC, CQL, IQL: RLlib's SACCatalog with any-space encoders, and a choice of Q-network.

    With ``model_config: {q_network: concat}`` and ``Box`` actions, each Q-function
    reads ``(observation, action)`` through one MLP (:class:`ObsActionEncoderConfig`)
    instead of RLlib's two streams and fusion layers: 3 layers a pass instead of 7
    at the default sizes, which is most of a SAC update on a small machine
    (benchmarks/replay.py).  The heads and losses stay RLlib's.
    """

    def build_qf_encoder(self, framework: str) -> Encoder:
        model_config = internals.catalog_model_config(self)
        if model_config.get(Q_NETWORK) == "concat" and isinstance(self.action_space, gym.spaces.Box):
            space = gym.spaces.Tuple((self.observation_space, self.action_space))
            return ObsActionEncoderConfig.from_model_config(space, model_config).build(framework)
        encoder: Encoder = super().build_qf_encoder(framework)
        return encoder


class AnySpaceBCCatalog(AnySpaceMixin, BCCatalog):
    """BC: RLlib's BCCatalog with any-space encoders."""
