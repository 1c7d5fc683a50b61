"""RLlib's default RLModules plus action masking.

Observations ``{"observations": x, "action_mask": m}`` carry one mask entry
per choice of every discrete part of the action (see
:func:`~envsdk.envs.spaces.action_leaves`).  The encoder reads
``x`` (:mod:`envsdk.networks.encoder`); these modules then make the
forbidden choices impossible:

* PPO, IMPALA (``MaskedPPOTorchRLModule``) and APPO
  (``MaskedAPPOTorchRLModule``, its target network too): the logits of
  forbidden choices become a large negative number.  Only the discrete
  columns of the action distribution's inputs are touched, so a hybrid
  ``Tuple(Box, Discrete)`` action keeps its Gaussian part as it is;
* DQN (``MaskedDQNTorchRLModule``): the Q-values of forbidden actions become
  ``-inf``, which RLlib's DQN already treats as "not available" in its greedy
  choice, its epsilon-random choice and its targets;
* SAC with ``Discrete`` actions (``MaskedSACTorchRLModule``): the policy's
  logits as PPO's, in sampling, inference and training, so a forbidden
  action has probability 0; and RLlib's discrete SAC loss, which sums
  ``probability * (Q - alpha * log-probability)`` over every action (the soft
  value of the target, the actor loss, the entropy), gets 0 for a forbidden
  action's log-probability and Q-values, so that it adds exactly nothing
  (``0 * log 0 = 0``, never ``0 * -inf = NaN``).

Without a mask in the observation space the modules behave exactly like
RLlib's, so one module class can serve masked and unmasked policies of one
multi-agent run.
"""

from __future__ import annotations

from typing import Any, cast

import torch
from ray.rllib.algorithms.appo.torch.default_appo_torch_rl_module import DefaultAPPOTorchRLModule
from ray.rllib.algorithms.dqn.default_dqn_rl_module import QF_PREDS
from ray.rllib.algorithms.dqn.torch.default_dqn_torch_rl_module import DefaultDQNTorchRLModule
from ray.rllib.algorithms.ppo.torch.default_ppo_torch_rl_module import DefaultPPOTorchRLModule
from ray.rllib.algorithms.sac import sac_learner as sac
from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
from ray.rllib.core.columns import Columns
from ray.rllib.core.models.base import ENCODER_OUT
from ray.rllib.core.rl_module.apis import TARGET_NETWORK_ACTION_DIST_INPUTS

from envsdk.envs.keys import MASK_KEY, has_action_mask
from envsdk.envs.spaces import action_leaves

FORBIDDEN_LOGIT = -1e9  # exp() of it is 0 in float32: never sampled, never the argmax


class ActionMaskingMixin:
    """Put before an RLlib default torch RLModule class; see the module docstring."""

    observation_space: Any
    action_space: Any

    def setup(self) -> None:
        super().setup()  # type: ignore[misc]
        self.mask_runs: tuple[tuple[int, int, int], ...] = ()
        self.mask_everything = False
        if has_action_mask(self.observation_space):
            leaves = action_leaves(self.action_space)
            runs = [
                (leaf.start, leaf.width, leaf.mask_start) for leaf in leaves if leaf.mask_start is not None
            ]
            total = sum(leaf.width for leaf in leaves)
            self.mask_runs = tuple(runs)
            self.mask_everything = runs == [(0, total, 0)]

    def masked_inputs(self, values: torch.Tensor, batch: dict[str, Any], fill: float) -> torch.Tensor:
        """``values`` (the action distribution's inputs) with forbidden choices set to ``fill``."""
        if not self.mask_runs:
            return values
        # 0 forbids (masks hold 0 and 1); `<` rather than `==`, which ONNX opset 9 (Barracuda's
        # brains) cannot compare on floats.
        forbidden = batch[Columns.OBS][MASK_KEY] < 0.5
        if self.mask_everything:
            return values.masked_fill(forbidden, fill)
        pieces, position = [], 0
        for start, width, mask_start in self.mask_runs:
            if start > position:
                pieces.append(values[..., position:start])
            part = values[..., start : start + width]
            pieces.append(part.masked_fill(forbidden[..., mask_start : mask_start + width], fill))
            position = start + width
        if position < values.shape[-1]:
            pieces.append(values[..., position:])
        return torch.cat(pieces, dim=-1)

    def _mask_output(self, out: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
        out[Columns.ACTION_DIST_INPUTS] = self.masked_inputs(
            out[Columns.ACTION_DIST_INPUTS], batch, FORBIDDEN_LOGIT
        )
        return out


class _MaskedPolicyLogits(ActionMaskingMixin):
    """The PPO family: mask the policy head's outputs."""

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._mask_output(super()._forward(batch, **kwargs), batch)  # type: ignore[misc]

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return self._mask_output(super()._forward_train(batch, **kwargs), batch)  # type: ignore[misc]


class MaskedPPOTorchRLModule(_MaskedPolicyLogits, DefaultPPOTorchRLModule):
    """RLlib's default PPO/IMPALA module with action masking."""


class MaskedAPPOTorchRLModule(_MaskedPolicyLogits, DefaultAPPOTorchRLModule):
    """RLlib's default APPO module with action masking (its target network's outputs too)."""

    def forward_target(self, batch: dict[str, Any]) -> dict[str, Any]:
        out = super().forward_target(batch)
        key = TARGET_NETWORK_ACTION_DIST_INPUTS
        out[key] = self.masked_inputs(out[key], batch, FORBIDDEN_LOGIT)
        return out


class MaskedDQNTorchRLModule(ActionMaskingMixin, DefaultDQNTorchRLModule):
    """RLlib's default DQN module with action masking (Discrete actions)."""

    # a private RLlib hook: envsdk.internals.OVERRIDDEN
    def _qf_forward_helper(self, batch: dict[str, Any], encoder: Any, head: Any) -> dict[str, Any]:
        out = super()._qf_forward_helper(batch, encoder, head)
        out[QF_PREDS] = self.masked_inputs(cast(torch.Tensor, out[QF_PREDS]), batch, float("-inf"))
        return out


class MaskedSACTorchRLModule(ActionMaskingMixin, DefaultSACTorchRLModule):
    """RLlib's default SAC module with action masking (Discrete actions; see the module docstring)."""

    def _forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        # RLlib's exploration pass is its inference pass: both masked here
        return self._mask_output(super()._forward_inference(batch, **kwargs), batch)

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        if not self.mask_runs:
            return super()._forward_train(batch, **kwargs)
        # RLlib's _forward_train_discrete, with the masks of the observations and next observations
        current = {Columns.OBS: batch[Columns.OBS]}
        following = {Columns.OBS: batch[Columns.NEXT_OBS]}
        out: dict[str, Any] = {}
        with torch.no_grad():  # RLlib's loss detaches its target
            out[sac.ACTION_PROBS_NEXT], out[sac.ACTION_LOG_PROBS_NEXT] = self._masked_policy(following)
            target = cast(torch.Tensor, self.forward_target(following, squeeze=False))
            out[sac.QF_TARGET_NEXT] = self._zero_forbidden(target, following)
        critics = [(sac.QF_PREDS, self.qf_encoder, self.qf)]
        if self.twin_q:
            critics.append((sac.QF_TWIN_PREDS, self.qf_twin_encoder, self.qf_twin))
        for key, encoder, head in critics:
            out[key] = self._zero_forbidden(head(encoder(current)[ENCODER_OUT]), current)
        out[sac.ACTION_PROBS], out[sac.ACTION_LOG_PROBS] = self._masked_policy(current)
        return out

    def _masked_policy(self, batch: dict[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Probabilities (0 for forbidden actions) and log-probabilities (0 there: ``0 * log 0 = 0``)."""
        logits = self.pi(self.pi_encoder(batch)[ENCODER_OUT])
        log_probs = torch.log_softmax(self.masked_inputs(logits, batch, FORBIDDEN_LOGIT), dim=-1)
        return log_probs.exp(), self._zero_forbidden(log_probs, batch)

    def _zero_forbidden(self, values: torch.Tensor, batch: dict[str, Any]) -> torch.Tensor:
        return self.masked_inputs(values, batch, 0.0)
