"""``run: POCA``: MA-POCA (Cohen et al. 2021; ML-Agents' ``trainer_type: poca``) as an RLlib algorithm.

PPO's algorithm, sampling and policy update, with two pieces of its own: a group critic per policy
(:class:`~envsdk.networks.poca.GroupCriticModule`, a learner-only module of the MultiRLModule) and
the learner that computes POCA's returns and advantages with it
(:class:`~envsdk.training.substitutes.poca.learner.POCATorchLearner`).  Its config is PPO's plus
:attr:`POCAConfig.groups` (agent id -> group, for envs whose infos do not carry ML-Agents'
``group_id``) and :attr:`POCAConfig.group_reward_from_infos`.  The build adds the critics
(:mod:`envsdk.training.build.modules.poca`).
"""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.ppo.ppo import PPO, PPOConfig

from envsdk.errors import UserError
from envsdk.training.substitutes.poca.learner import POCATorchLearner


class POCAConfig(PPOConfig):
    """PPO's config; ``groups`` and ``group_reward_from_infos`` are POCA's own keys."""

    def __init__(self, algo_class: type | None = None) -> None:
        super().__init__(algo_class=algo_class or POCA)  # type: ignore[no-untyped-call]
        # agent id -> group; None: the infos' group_id (ML-Agents' groups; 0 or missing: no group)
        self.groups: dict[Any, Any] | None = None
        # whether infos' group_reward is added to each member's reward; None: the env says
        # (envs whose rewards already hold it set group_reward_in_rewards = True: Unity games)
        self.group_reward_from_infos: bool | None = None
        # ML-Agents' POCA loss has no KL penalty (PPO's RLlib default has one: use_kl_loss: true)
        self.use_kl_loss = False

    def get_default_learner_class(self) -> type:
        if self.framework_str != "torch":
            raise UserError(
                f"run: POCA is built for torch; this run's framework is {self.framework_str}",
                "drop framework (torch is the default), or set framework: torch",
            )
        return POCATorchLearner


class POCA(PPO):
    """PPO with MA-POCA's centralised critic and counterfactual baseline."""

    @classmethod
    def get_default_config(cls) -> POCAConfig:
        return POCAConfig()
