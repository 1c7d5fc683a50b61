"""MA-POCA's centralised critic (Cohen et al. 2021, ML-Agents' ``trainer_type: poca``), as one
learner-only RLModule per policy.

:class:`GroupCriticModule` sits in the MultiRLModule beside the policy whose groups it judges
(module id ``<policy>@poca_critic``, ``learner_only``: env runners never build it, rollouts and
exports never see it), so that its weights and optimizer state go into checkpoints with the policy's.
It gives two estimates from one network, as ML-Agents' ``MultiAgentNetworkBody`` does:

* the **value** of a group's state: every present member's observation, each read by the default
  readers of its parts (:class:`~envsdk.networks.encoder.SpaceEncoderConfig` without its MLP: vector
  parts flattened, one-hots, a CNN per camera, attention over entity sets) and embedded;
* the **baseline** of one member: its own observation, and every other present member's observation
  *and action* (one-hot per discrete branch, continuous values as they are), embedded by a second
  embedding, so that the member's own action is what the baseline leaves out (the counterfactual).

Both sets of entities go through the same residual self-attention over members
(:class:`~envsdk.networks.entities.EntityAttention`: absent members, padding of a group smaller than
the largest, are masked as keys and left out of the mean), then ``num_layers`` layers of
``hidden_units`` (Swish, as ML-Agents' ``LinearEncoder``), the count of members present (as
ML-Agents: ``2 n / most - 1``, ``most`` the largest count seen, kept in the module's state) and one
linear value output.  The
attention makes the estimates independent of the members' order and of how many are present.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
import tree
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from torch import nn

from envsdk.networks.encoder import SpaceEncoderConfig
from envsdk.networks.entities import EntityAttention
from envsdk.networks.reward_signals import flat

SUFFIX = "@poca_critic"
HIDDEN_UNITS = "hidden_units"  # the module's model_config keys: the policy's layer width and count
NUM_LAYERS = "num_layers"
HEADS = 4  # ML-Agents' ResidualSelfAttention


def critic_module_id(policy: str) -> str:
    """The id of the learner-only module holding ``policy``'s group critic."""
    return f"{policy}{SUFFIX}"


def policy_of_critic(module_id: str) -> str | None:
    """The policy a critic module serves (None: ``module_id`` is no such module)."""
    return module_id[: -len(SUFFIX)] if module_id.endswith(SUFFIX) else None


def action_width(space: gym.Space) -> int:
    """The width of an action once encoded for the baseline (:func:`encode_actions`)."""
    sample = tree.map_structure(lambda x: torch.as_tensor(x)[None], space.sample())
    return int(flat(space, sample).shape[1])


def encode_actions(space: gym.Space, actions: Any) -> torch.Tensor:
    """A batch of actions as floats (rows, width): discrete branches one-hot, continuous as they are."""
    return flat(space, actions)


def _rows(value: Any, rows: int) -> Any:
    """A (batch, members, ...) structure as (batch * members, ...), leaf by leaf."""
    return tree.map_structure(lambda x: x.reshape(rows, *x.shape[2:]), value)


class GroupCriticModule(TorchRLModule):
    """One policy's group critic (its ``model_config``: :data:`HIDDEN_UNITS`, :data:`NUM_LAYERS`);
    it never acts.  Inputs of :meth:`values` and :meth:`baselines`, by row (one member's step):
    ``obs`` its own observation; ``others`` the other members' observations, (rows, K, ...) with
    ``absent`` (rows, K) 1.0 where a slot holds no member; ``others_actions`` (rows, K, width)."""

    def setup(self) -> None:
        config: Any = self.model_config
        obs_space: Any = self.observation_space
        act_space: Any = self.action_space
        hidden, layers = int(config[HIDDEN_UNITS]), int(config[NUM_LAYERS])
        width = hidden - hidden % HEADS or HEADS
        readers = SpaceEncoderConfig(observation_space=obs_space, hidden_layer_dims=[])
        self.readers = readers.build()
        seen = self.seen = int(readers.output_dims[0])
        self.actions = action_width(act_space)
        # Set 0: members seen by their observations; set 1: members seen with their actions.
        self.attention = EntityAttention(0, [seen, seen + self.actions], embedding=width, heads=HEADS)
        body: list[nn.Module] = []
        size = width
        for _ in range(layers):
            body += [nn.Linear(size, hidden), nn.SiLU()]
            size = hidden
        self.body = nn.Sequential(*body)
        self.value = nn.Linear(size + 1, 1)
        self.register_buffer("most_members", torch.ones(()))

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("a group critic judges a group's steps; it does not act")

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {}  # its loss reads the batch itself (the POCA learner)

    def _read(self, obs: Any) -> torch.Tensor:
        readers: Any = self.readers  # an RLlib Encoder, a torch module
        out: torch.Tensor = readers({Columns.OBS: obs})[ENCODER_OUT]
        return out

    def _read_members(self, others: Any, absent: torch.Tensor) -> torch.Tensor:
        rows, members = absent.shape
        if members == 0:
            return absent.new_zeros((rows, 0, self.seen))
        return self._read(_rows(others, rows * members)).reshape(rows, members, -1)

    def _estimate(self, sets: list[torch.Tensor], absent: list[torch.Tensor]) -> torch.Tensor:
        pooled = self.attention(None, sets, absent)
        count = torch.stack([(1.0 - a).sum(dim=1) for a in absent]).sum(dim=0)
        if self.training:
            self.most_members.copy_(torch.maximum(self.most_members, count.max()))
        most: Any = self.most_members
        scaled = (2.0 * count / torch.maximum(most, count.max()) - 1.0).unsqueeze(-1)
        out: torch.Tensor = self.value(torch.cat([self.body(pooled), scaled], dim=-1)).squeeze(-1)
        return out

    def values(self, obs: Any, others: Any, absent: torch.Tensor) -> torch.Tensor:
        """The group's value at each row's step: the member and every present other, by observation."""
        return self._values(self._read(obs), self._read_members(others, absent), absent)

    def baselines(
        self, obs: Any, others: Any, others_actions: torch.Tensor, absent: torch.Tensor
    ) -> torch.Tensor:
        """The member's baseline at each row's step: its own observation, the others' with their actions."""
        return self._baselines(self._read(obs), self._read_members(others, absent), others_actions, absent)

    def estimates(
        self, obs: Any, others: Any, others_actions: torch.Tensor, absent: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`values` and :meth:`baselines` together, each observation read once."""
        me, them = self._read(obs), self._read_members(others, absent)
        return self._values(me, them, absent), self._baselines(me, them, others_actions, absent)

    def _values(self, me: torch.Tensor, them: torch.Tensor, absent: torch.Tensor) -> torch.Tensor:
        seen = torch.cat([me.unsqueeze(1), them], dim=1)
        present = torch.cat([absent.new_zeros((len(absent), 1)), absent.float()], dim=1)
        empty = seen.new_zeros((len(seen), 0, seen.shape[-1] + self.actions))
        return self._estimate([seen, empty], [present, present[:, :0]])

    def _baselines(
        self, me: torch.Tensor, them: torch.Tensor, others_actions: torch.Tensor, absent: torch.Tensor
    ) -> torch.Tensor:
        acted = torch.cat([them, others_actions.float()], dim=-1)
        alone = absent.new_zeros((len(absent), 1))
        return self._estimate([me.unsqueeze(1), acted], [alone, absent.float()])
