"""RLlib's default SAC module with a leaner training pass for Box actions: same outputs, less work.

RLlib 2.60's ``DefaultSACTorchRLModule._forward_train_continuous`` is most of a
SAC update on a small machine (benchmarks/floor.py: 5-9 ms of a 15-25 ms step on
HalfCheetah).  About half of that is the arithmetic; the rest is how it is driven:

* ``TorchRLModule.forward_train`` sets every submodule to training mode at every
  update (about 70 ``train()`` calls for the default networks), though they are
  already in it;
* the policy's pass over the next observations builds a graph that nothing
  differentiates (its outputs are detached);
* each Q-network evaluation goes through RLlib's model wrappers, the encoder's
  readers and ``nn.Sequential`` (some twenty module calls a pass, six passes),
  and the actor's pass through the critics switches ``requires_grad`` off and
  on for every critic weight.

This module keeps RLlib's networks, names, outputs and losses (a checkpoint is
RLlib's, the learner's losses read the same keys) and changes only the pass:
modes are set only where one is off, the next observations' policy pass runs
without a graph, and a critic that is a plain MLP over ``[observation,
action]`` (``q_network: concat`` on Box observations) is read as its layers:
``F.linear`` on the module's own weights, detached weights where RLlib switches
``requires_grad`` off.  Any other critic (RLlib's streams, image or dict
observations) takes RLlib's own pass, and only the first saving.

The twin critics stay two networks.  One ``baddbmm`` per layer over stacked
twin weights measured no faster than two ``F.linear`` calls on the CPUs here
(the three critic passes of an update and their backward, 256x256, batch 256,
2 threads: medians of 3.6-3.9 ms against 3.6-4.5 ms over three runs), and
keeping them apart keeps RLlib's parameter names, optimizers and checkpoints.

Discrete actions take RLlib's pass unchanged.  ``tests/training/substitutes/test_sac_module.py``
compares the outputs, RLlib's losses on them and their gradients with RLlib's
own pass on the same weights and random draws.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from ray.rllib.algorithms.sac.sac_learner import ACTION_DIST_INPUTS_NEXT, QF_PREDS, QF_TWIN_PREDS
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.models.torch.heads import TorchMLPHead
from ray.rllib.core.models.torch.primitives import TorchMLP
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModule
from torch import nn

from envsdk.networks.encoder import TorchObsActionEncoder, is_flat_reader

# parameter-free layers that act on each value alone: applied as they are
_ELEMENTWISE = (nn.ReLU, nn.Tanh, nn.SiLU, nn.ELU, nn.Sigmoid, nn.LeakyReLU, nn.GELU, nn.Identity)

Layers = tuple[nn.Module, ...]


def mlp_layers(module: nn.Module) -> Layers | None:
    """The layers a plain MLP applies in order (``nn.Linear`` and elementwise ones); None otherwise."""
    if isinstance(module, nn.Identity):
        return ()
    if isinstance(module, TorchMLP):
        module = module.mlp
    if isinstance(module, nn.Sequential) and all(isinstance(m, (nn.Linear, *_ELEMENTWISE)) for m in module):
        return tuple(module)
    return None


def critic_layers(encoder: nn.Module, head: nn.Module) -> Layers | None:
    """A Q-network as the layers of one MLP over ``[flat observation, flat action]``, where it is one."""
    if not (
        isinstance(encoder, TorchObsActionEncoder)
        and not encoder.masked
        and encoder.paths == [(0,), (1,)]
        and all(is_flat_reader(r) for r in encoder.readers)
        and isinstance(head, TorchMLPHead)
        and not head.clip_log_std
    ):
        return None
    body, top = mlp_layers(encoder.mlp), mlp_layers(head.net)
    return None if body is None or top is None else body + top


def run_layers(layers: Layers, x: torch.Tensor, *, detach: bool) -> torch.Tensor:
    """The MLP's output; with ``detach``, no gradient reaches its weights (it still reaches ``x``)."""
    for layer in layers:
        if isinstance(layer, nn.Linear):
            weight: torch.Tensor = layer.weight
            bias: torch.Tensor | None = layer.bias
            if detach:
                weight, bias = weight.detach(), None if bias is None else bias.detach()
            x = F.linear(x, weight, bias)
        else:
            x = layer(x)
    return x


class LeanSACTorchRLModule(DefaultSACTorchRLModule):
    """RLlib's default SAC module; its training pass for Box actions does the same with less work."""

    def forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # TorchRLModule.forward_train calls self.train(), which sets every submodule each update
        if not all(m.training for m in self.modules()):
            self.train()
        return RLModule.forward_train(self, batch, **kwargs)

    def _critics(self) -> list[tuple[Layers, Layers]] | None:
        """Each critic's (online, target) layers, where every critic is a plain MLP; else None."""
        nets = [("qf_encoder", "qf")] + ([("qf_twin_encoder", "qf_twin")] if self.twin_q else [])
        pairs = [
            (critic_layers(getattr(self, enc), getattr(self, head)),
             critic_layers(getattr(self, f"target_{enc}"), getattr(self, f"target_{head}")))
            for enc, head in nets
        ]  # fmt: skip
        return None if any(a is None or b is None for a, b in pairs) else pairs  # type: ignore[return-value]

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        critics = self._critics() if isinstance(self.action_space, gym.spaces.Box) else None
        if critics is None:
            return super()._forward_train(batch, **kwargs)  # RLlib's own pass
        return self._lean_forward_train_continuous(batch, critics)

    def _lean_forward_train_continuous(
        self, batch: dict[str, Any], critics: list[tuple[Layers, Layers]]
    ) -> dict[str, Any]:
        """RLlib's ``_forward_train_continuous``: the same outputs, from the same random draws."""
        obs, next_obs = batch[Columns.OBS], batch[Columns.NEXT_OBS]
        logits = self.pi(self.pi_encoder({Columns.OBS: obs})[ENCODER_OUT])
        with torch.no_grad():  # RLlib detaches everything that comes of it
            logits_next = self.pi(self.pi_encoder({Columns.OBS: next_obs})[ENCODER_OUT])
        dist_class = self.get_train_action_dist_cls()
        actions_resampled, logp_resampled = dist_class.from_logits(logits).rsample_and_logp()
        with torch.no_grad():
            actions_next, logp_next = dist_class.from_logits(logits_next).sample_and_logp()
        return {
            Columns.ACTION_DIST_INPUTS: logits,
            ACTION_DIST_INPUTS_NEXT: logits_next,
            "logp_resampled": logp_resampled,
            "logp_next_resampled": logp_next,
            **self._q_by_layers(critics, batch, actions_resampled, actions_next),
        }

    def _q_by_layers(
        self,
        critics: list[tuple[Layers, Layers]],
        batch: dict[str, Any],
        actions_resampled: torch.Tensor,
        actions_next: torch.Tensor,
    ) -> dict[str, torch.Tensor]:
        read_obs, read_action = self.qf_encoder.readers  # flat readers: the same for every critic
        obs, next_obs = read_obs(batch[Columns.OBS]), read_obs(batch[Columns.NEXT_OBS])
        taken = torch.cat([obs, read_action(batch[Columns.ACTIONS])], dim=-1)
        resampled = torch.cat([obs, read_action(actions_resampled)], dim=-1)
        preds = [run_layers(online, taken, detach=False).squeeze(-1) for online, _ in critics]
        # the actor's pass: gradients reach the actions (the policy), not the critics' weights
        q_curr = _smallest([run_layers(online, resampled, detach=True).squeeze(-1) for online, _ in critics])
        with torch.no_grad():
            following = torch.cat([next_obs, read_action(actions_next)], dim=-1)
            q_next = _smallest([run_layers(t, following, detach=False).squeeze(-1) for _, t in critics])
        out = {QF_PREDS: preds[0], "q_curr": q_curr, "q_target_next": q_next}
        if self.twin_q:
            out[QF_TWIN_PREDS] = preds[1]
        return out


def _smallest(values: list[torch.Tensor]) -> torch.Tensor:
    return values[0] if len(values) == 1 else torch.min(values[0], values[1])


def lean_sac_module(config: Any) -> None:
    """Put this module in place of RLlib's default SAC module, in each module spec that has it.

    Only RLlib's own class is replaced: a user's module, or a subclass of RLlib's
    (CQL's and IQL's modules are), stays as it is.
    """
    if config.get_default_rl_module_spec().module_class is not DefaultSACTorchRLModule:
        return  # not SAC
    spec = config.rl_module_spec  # the user's spec merged with the default (a copy)
    specs: list[Any] = (
        list(spec.rl_module_specs.values())
        if isinstance(spec, MultiRLModuleSpec) and isinstance(spec.rl_module_specs, dict)
        else [spec.rl_module_specs if isinstance(spec, MultiRLModuleSpec) else spec]
    )
    swapped = [one for one in specs if one.module_class in (None, DefaultSACTorchRLModule)]
    for one in swapped:
        one.module_class = LeanSACTorchRLModule
    if swapped:
        config.rl_module(rl_module_spec=spec)
