"""Reward signals (``reward_signals:``) in envsdk's learners: what PPO's and the others' share.

Every learner that takes reward signals learns each policy's ``<policy>@reward_signals`` module
(:class:`~envsdk.networks.reward_signals.RewardSignalsModule`) the same way
(:class:`SignalModelsLearner`): one Adam per signal at the signal's ``learning_rate``, updated
where its policy is, its loss terms logged as ``learners/<policy>/reward_signals/<signal>/<term>``.

PPO learns a value head and a discount per signal (:mod:`envsdk.training.substitutes.ppo.signals`).
APPO, IMPALA, SAC and DQN have one value or Q function, so they take ML-Agents' signals summed
(:class:`SummedSignalsLearner`): in the learner, before the algorithm's loss, each policy's reward
column becomes the sum of its signals' rewards times their strengths (the env's reward for
``extrinsic``, none without it), computed by the signal models' current weights; every signal
shares the policy's ``gamma`` (the config's build refuses another).  A policy whose signals all
bootstrap through a termination (curiosity, RND: ML-Agents' ``ignore_done``) learns with the batch's
terminations cleared; one with others too (extrinsic, GAIL) stops at them (a notice says so).  It
is done in the learner's loss, not in a connector piece, because APPO's and IMPALA's aggregator
actors and DQN's and SAC's transition replay build the train batch where the signal models are not.
The signals a policy takes reach the learner in ``learner_config_dict`` (:data:`LEARNER_KEY`).

GAIL with ``use_actions`` reads each step's done flag; where RLlib's ``AddOneTsToEpisodesAndTruncate``
builds the batch (PPO, APPO, IMPALA) :class:`MarkEpisodeEnds` takes its place to say it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import tree
from ray.rllib.algorithms.appo.torch.appo_torch_learner import APPOTorchLearner as RLlibAPPOTorchLearner
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner as RLlibDQNTorchLearner
from ray.rllib.algorithms.impala.torch.impala_torch_learner import (
    IMPALATorchLearner as RLlibIMPALATorchLearner,
)
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner as RLlibPPOTorchLearner
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner
from ray.rllib.connectors.common.add_observations_from_episodes_to_batch import (
    AddObservationsFromEpisodesToBatch,
)
from ray.rllib.connectors.learner.add_next_observations_from_episodes_to_train_batch import (
    AddNextObservationsFromEpisodesToTrainBatch as AddNextObservations,
)
from ray.rllib.connectors.learner.add_one_ts_to_episodes_and_truncate import (
    AddOneTsToEpisodesAndTruncate,
)
from ray.rllib.core.columns import Columns
from ray.rllib.utils.typing import ModuleID, ParamDict

from envsdk import internals, substitutions
from envsdk.config.own_keys.reward_signals import EXTRINSIC, RewardSignals
from envsdk.networks.reward_signals import (
    EPISODE_ENDED,
    RewardSignalsModule,
    policy_of_signals,
    signals_module_id,
)

REWARD_SIGNALS = "reward_signals"  # the learner results' key under each policy
LEARNER_KEY = "reward_signals"  # learner_config_dict: {policy: RewardSignals.to_config()}
SIGNAL_COLUMNS = (  # the last four make GAIL's done flag (networks.reward_signals.episode_ends)
    Columns.OBS,
    Columns.NEXT_OBS,
    Columns.ACTIONS,
    Columns.LOSS_MASK,
    Columns.TERMINATEDS,
    Columns.TRUNCATEDS,
    EPISODE_ENDED,
)

# RLlib's learner -> its algorithm and the substitution whose learner takes reward signals in its
# place: PPO's a value per signal, the others' the signals' rewards summed (one gamma).
SIGNAL_LEARNERS: dict[type, tuple[str, str]] = {
    RLlibPPOTorchLearner: ("PPO", substitutions.PPO_LEARNER),
    RLlibAPPOTorchLearner: ("APPO", substitutions.IMPALA_LEARNER),
    RLlibIMPALATorchLearner: ("IMPALA", substitutions.IMPALA_LEARNER),
    RLlibSACTorchLearner: ("SAC", substitutions.SAC_LEARNER),
    RLlibDQNTorchLearner: ("DQN", substitutions.DQN_LEARNER),
}


class SignalModelsLearner:
    """Mixin for a TorchLearner (before RLlib's class in the bases): the reward-signals modules'
    optimizers, updates and losses."""

    def should_module_be_updated(self, module_id: ModuleID, multi_agent_batch: Any = None) -> bool:
        """RLlib's; a reward-signals module learns where its policy does (``policies_to_train``
        names policies, and RLlib refuses an id that is none)."""
        policy = policy_of_signals(module_id)
        decide: Any = super().should_module_be_updated  # type: ignore[misc]  # RLlib's, untyped
        return bool(decide(policy or module_id, multi_agent_batch))

    def configure_optimizers_for_module(self, module_id: ModuleID, config: Any = None) -> None:
        """RLlib's; a reward-signals module gets one Adam per signal (:meth:`signal_optimizers`)."""
        if not self.signal_optimizers(module_id):
            super().configure_optimizers_for_module(module_id, config)  # type: ignore[misc]

    def signal_optimizers(self, module_id: ModuleID) -> bool:
        """One Adam per signal at the signal's learning_rate, where ``module_id`` is a reward-signals
        module; whether it was one (a learner with optimizers of its own calls this first)."""
        learner: Any = self
        module = learner.module[module_id].unwrapped()
        if not isinstance(module, RewardSignalsModule):
            return False
        for signal in module.settings.intrinsic:
            params = [p for p in module.models[signal.name].parameters() if p.requires_grad]
            learner.register_optimizer(
                module_id=module_id,
                optimizer_name=signal.name,
                optimizer=torch.optim.Adam(params),
                params=params,
                lr_or_lr_schedule=signal.learning_rate,
            )
        return True

    def signals_loss(self, module_id: ModuleID, rows: dict[str, Any]) -> torch.Tensor:
        """A reward-signals module's loss on its policy's ``rows`` (the sum of its models' losses),
        each model's terms logged under its policy's results."""
        learner: Any = self
        module = learner.module[module_id].unwrapped()
        total, stats = module.losses(rows)
        policy = str(policy_of_signals(module_id))
        for name, terms in stats.items():
            for term, value in terms.items():
                learner.metrics.log_value((policy, REWARD_SIGNALS, name, term), value, window=1)
        loss: torch.Tensor = total
        return loss


def summed_rewards(
    env: torch.Tensor,
    intrinsic: Mapping[str, torch.Tensor],
    signals: RewardSignals,
    mask: torch.Tensor | None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The reward a one-value algorithm learns from: each signal's reward times its strength, summed
    (``env`` for extrinsic, ``intrinsic[name]`` for the others, shaped as ``env``; none of the
    env's without extrinsic).  Rows that ``mask`` drops (padding, IMPALA's bootstrap step) get no
    intrinsic reward, as the env gives them none.  Also each signal's mean over the rows that count
    (its ``reward_mean``)."""
    keep = None if mask is None else mask.reshape(env.shape).to(env.dtype)
    total = torch.zeros_like(env, dtype=torch.float32)
    means = {}
    for signal in signals.signals:
        if signal.name == EXTRINSIC:
            reward = env.to(torch.float32)
        else:
            reward = intrinsic[signal.name].reshape(env.shape).to(torch.float32)
            reward = reward if keep is None else reward * keep
        scaled = signal.strength * reward
        total = total + scaled
        counted = scaled if keep is None else scaled[keep.bool()]
        means[signal.name] = float(counted.mean()) if counted.numel() else 0.0
    return total, means


def rows_of(columns: Mapping[str, Any], steps: int) -> dict[str, Any]:
    """The columns a signal model reads, one row per step: a (sequences, steps, ...) batch of a
    recurrent module flattened over its first ``steps`` axes (the reward column's)."""
    return {
        k: tree.map_structure(lambda x: x.reshape(-1, *x.shape[steps:]), columns[k])
        for k in SIGNAL_COLUMNS
        if k in columns
    }


class SummedSignalsLearner(SignalModelsLearner):
    """Mixin for a one-value learner (APPO, IMPALA, SAC, DQN; before RLlib's class in the bases):
    each policy with signals learns from their summed rewards, and its signal models learn on the
    same batch."""

    def build(self) -> None:
        learner: Any = self
        given = learner.config.learner_config_dict.get(LEARNER_KEY) or {}
        # before RLlib's build: IMPALA's starts the learner thread, whose updates read it
        self.summed_signals = {str(p): RewardSignals.from_config(v) for p, v in given.items()}
        super().build()  # type: ignore[misc]
        pipeline = internals.learner_connector(learner)
        mark_episode_ends(pipeline, learner.module)
        # Curiosity reads each step's next observation: APPO's and IMPALA's connector has none (DQN's
        # and SAC's has; with aggregator actors the config's build refuses curiosity).
        curious = any(s.name == "curiosity" for v in self.summed_signals.values() for s in v.signals)
        if curious and pipeline is not None and not _has(pipeline, AddNextObservations):
            pipeline.insert_after(AddObservationsFromEpisodesToBatch, AddNextObservations())

    def compute_losses(self, *, fwd_out: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
        """RLlib's losses on the batch with each signalled policy's rewards summed; then each of
        their signals modules' losses on the same rows."""
        batch = dict(batch)
        models: dict[ModuleID, dict[str, Any]] = {}
        for module_id, columns in list(batch.items()):
            signals = self.summed_signals.get(str(module_id))
            if signals is None:
                continue
            batch[module_id], rows = self._summed(module_id, columns, signals)
            if signals.intrinsic:
                models[signals_module_id(str(module_id))] = rows
        losses: dict[str, Any] = super().compute_losses(fwd_out=fwd_out, batch=batch)  # type: ignore[misc]
        for module_id, rows in models.items():
            losses[module_id] = self.signals_loss(module_id, rows)
        return losses

    def _summed(
        self, module_id: ModuleID, columns: Mapping[str, Any], signals: RewardSignals
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The policy's columns with the summed reward; the rows its signal models read."""
        learner: Any = self
        env = columns[Columns.REWARDS]
        rows = rows_of(columns, env.ndim)
        intrinsic: Mapping[str, torch.Tensor] = {}
        if signals.intrinsic:
            intrinsic = learner.module[signals_module_id(str(module_id))].unwrapped().rewards(rows)
        total, means = summed_rewards(env, intrinsic, signals, columns.get(Columns.LOSS_MASK))
        for name, mean in means.items():
            learner.metrics.log_value((module_id, REWARD_SIGNALS, name, "reward_mean"), mean, window=1)
        summed = {**columns, Columns.REWARDS: total.to(env.dtype)}
        if all(s.ignore_done for s in signals.signals) and Columns.TERMINATEDS in columns:
            # curiosity's and RND's values bootstrap through a termination (ML-Agents' ignore_done)
            summed[Columns.TERMINATEDS] = torch.zeros_like(columns[Columns.TERMINATEDS])
        return summed, rows

    def signals_gradients(self, losses: dict[ModuleID, Any]) -> ParamDict:
        """The gradients of the reward-signals modules' losses, popped from ``losses``: one
        backward pass over each module's loss (its models' parameters are disjoint).  For a learner
        that computes the others' its own way (SAC: a pass per optimizer)."""
        learner: Any = self
        grads: ParamDict = {}
        params = internals.learner_params(learner)
        for module_id in [m for m in losses if policy_of_signals(str(m)) is not None]:
            optimizers = [opt for _, opt in learner.get_optimizers_for_module(module_id)]
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            losses.pop(module_id).backward()
            for optimizer in optimizers:
                own = learner.filter_param_dict_for_optimizer(params, optimizer)
                grads.update({pid: p.grad for pid, p in own.items()})
        return grads


class MarkEpisodeEnds(AddOneTsToEpisodesAndTruncate):
    """RLlib's piece (each episode chunk's bootstrap step, its last real step marked terminated or
    truncated), and a column :data:`~envsdk.networks.reward_signals.EPISODE_ENDED`: 1.0 at the last
    real step of an episode that ended (terminated, or truncated by the env), 0.0 elsewhere and at
    the bootstrap step.  RLlib's truncated flag cannot say it: its piece marks a chunk the sampler cut
    mid-episode truncated as well, and a column added before it would be keyed by the episode ids it
    renames, so the piece is RLlib's plus the column, in its place."""

    def __call__(self, *, episodes: list[Any], batch: dict[str, Any], **kwargs: Any) -> Any:
        ended = [
            (len(e), e.is_done)
            for e in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False)
        ]
        batch = super().__call__(episodes=episodes, batch=batch, **kwargs)
        chunks = self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False)
        for episode, (steps, done) in zip(chunks, ended, strict=True):
            flags = [0.0] * (steps - 1) + [float(done), 0.0]
            self.add_n_batch_items(batch, EPISODE_ENDED, flags, steps + 1, episode)
        return batch


def mark_episode_ends(pipeline: Any, modules: Any) -> None:
    """Put :class:`MarkEpisodeEnds` in place of RLlib's piece in a learner's connector ``pipeline``
    where one of its signals ``modules`` (a MultiRLModule) has GAIL with ``use_actions`` (the done
    flag it reads)."""
    done_read = any(
        s.name == "gail" and s.use_actions
        for m in modules.values()
        if isinstance(m.unwrapped(), RewardSignalsModule)
        for s in m.unwrapped().settings.intrinsic
    )
    if done_read and pipeline is not None and _has(pipeline, AddOneTsToEpisodesAndTruncate):
        pipeline.insert_after(AddOneTsToEpisodesAndTruncate, MarkEpisodeEnds())
        pipeline.remove(AddOneTsToEpisodesAndTruncate)


def _has(pipeline: Any, piece: type) -> bool:
    return any(isinstance(c, piece) for c in pipeline.connectors)
