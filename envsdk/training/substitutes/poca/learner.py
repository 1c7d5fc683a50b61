"""MA-POCA's learner: envsdk's PPO learner with the group critic's returns in place of RLlib's GAE
and the critic's loss beside the policy's.

The policy's loss is RLlib's PPO loss on POCA's advantages (the clipped surrogate and entropy, no
value term: the policy module's own value head is not trained or read).  The critic
(``<policy>@poca_critic``, its own Adam at the policy's learning rate) learns ML-Agents' terms:
``0.5 * (value loss + 0.5 * baseline loss)``, each the trust-region squared error against the
λ-returns, ``max((G - new)^2, (G - clip(new, old ± epsilon))^2)`` with ``epsilon`` the policy's
``clip_param``.  (ML-Agents 1.1.0 stores the returns where the old values belong, so its value term
is in effect unclipped; ours clips both, as the paper's and its baseline's code mean.)
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from ray.rllib.connectors.learner.general_advantage_estimation import GeneralAdvantageEstimation
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.torch_utils import explained_variance
from ray.rllib.utils.typing import ModuleID

from envsdk import internals
from envsdk.errors import UserError
from envsdk.networks.poca import GroupCriticModule, critic_module_id, policy_of_critic
from envsdk.training.hooks import agent_step_clock
from envsdk.training.substitutes.poca.groups import (
    ABSENT,
    OLD_BASELINES,
    OLD_VALUES,
    OTHERS,
    OTHERS_ACTIONS,
    GroupAdvantages,
)
from envsdk.training.substitutes.ppo.learner import PPOTorchLearner

GROUPS = "poca_groups"  # learner_config_dict keys: agent id -> group, from the config's ``groups``
GROUP_REWARD_FROM_INFOS = "poca_group_reward_from_infos"  # whether infos' group_reward is added


def trust_region_loss(
    new: torch.Tensor, old: torch.Tensor, targets: torch.Tensor, epsilon: float, mask: torch.Tensor | None
) -> torch.Tensor:
    """ML-Agents' clipped value loss: the larger of the squared errors of the new estimate and of the
    new estimate kept within ``epsilon`` of the old, averaged over the rows ``mask`` keeps."""
    clipped = old + torch.clamp(new - old, -epsilon, epsilon)
    error = torch.maximum((targets - new) ** 2, (targets - clipped) ** 2)
    if mask is None:
        return error.mean()
    weight = mask.float()
    return (error * weight).sum() / weight.sum().clamp(min=1.0)


class POCATorchLearner(PPOTorchLearner):
    """envsdk's PPO learner; each policy with a group critic learns from POCA's advantages."""

    def build(self) -> None:
        super().build()
        for module_id in list(self.module.keys()):
            policy = policy_of_critic(str(module_id))
            if policy is not None and self.module[policy].is_stateful():
                raise UserError(
                    f"run: POCA with a policy that keeps a memory ('{policy}': its module is stateful) is not"
                    " built in this version",
                    "give the policy a module without memory, or use run: PPO",
                )
        pipeline = internals.learner_connector(self)
        if pipeline is None:
            return
        config: Any = self.config
        piece = GroupAdvantages(
            gamma=config.gamma,
            lambda_=config.lambda_,
            groups=config.learner_config_dict.get(GROUPS),
            group_reward_from_infos=bool(config.learner_config_dict.get(GROUP_REWARD_FROM_INFOS, True)),
        )
        pipeline.insert_after(GeneralAdvantageEstimation, piece)
        pipeline.remove(GeneralAdvantageEstimation.__name__)

    def compute_loss_for_module(
        self, *, module_id: ModuleID, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> Any:
        module = self.module[module_id].unwrapped()
        if isinstance(module, GroupCriticModule):
            return self._critic_loss(module_id, module, config, batch)
        if critic_module_id(module_id) not in self.module:
            return super().compute_loss_for_module(
                module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
            )
        without_critic = copy.copy(config)
        without_critic.use_critic = False  # the group critic's advantages; the module's own value unused
        return self._policy_loss(module_id, without_critic, batch, fwd_out)

    def _critic_loss(
        self, module_id: ModuleID, critic: GroupCriticModule, config: Any, batch: dict[str, Any]
    ) -> Any:
        obs, others, absent = batch[Columns.OBS], batch[OTHERS], batch[ABSENT]
        values, baselines = critic.estimates(obs, others, batch[OTHERS_ACTIONS], absent)
        targets, mask = batch[Postprocessing.VALUE_TARGETS], batch.get(Columns.LOSS_MASK)
        scheduler = self._clip_scheduler(module_id, config)  # the policy's clip, and its schedule
        epsilon = float(scheduler.get_current_value()) if scheduler is not None else config.clip_param
        value_loss = trust_region_loss(values, batch[OLD_VALUES], targets, epsilon, mask)
        baseline_loss = trust_region_loss(baselines, batch[OLD_BASELINES], targets, epsilon, mask)
        kept = slice(None) if mask is None else mask.bool()
        self.metrics.log_dict(
            {
                "value_loss": value_loss,
                "baseline_loss": baseline_loss,
                "value_mean": values[kept].mean(),
                "baseline_mean": baselines[kept].mean(),
                "value_explained_var": explained_variance(targets[kept], values[kept]),
            },
            key=module_id,
            window=1,
        )
        return 0.5 * (value_loss + 0.5 * baseline_loss)

    def should_module_be_updated(self, module_id: ModuleID, multi_agent_batch: Any = None) -> bool:
        """A group critic learns where its policy does (``policies_to_train`` names policies)."""
        policy = policy_of_critic(str(module_id))
        return super().should_module_be_updated(policy or module_id, multi_agent_batch)

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        """envsdk's PPO learner's, each critic's schedules (learning rate, clip) counted by its policy's
        agent steps where the agent-step clock counts them."""
        own = dict(timesteps.get(agent_step_clock.MODULE_CLOCK) or {})
        for module_id in list(self.module.keys()):
            policy = policy_of_critic(str(module_id))
            if policy is not None and policy in own:
                own[module_id] = own[policy]
        if own:
            timesteps = {**timesteps, agent_step_clock.MODULE_CLOCK: own}
        super().after_gradient_based_update(timesteps=timesteps)
