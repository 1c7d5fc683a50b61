"""RLlib's PPO learner: the first epoch's minibatches drawn at random as the later ones are, and
advantages normalized per minibatch where the config asks.

RLlib 2.60's ``MiniBatchCyclicIterator`` shuffles the train batch each time it
wraps around, at the end of an epoch, and not before the first one.  So the
first epoch's minibatches are consecutive slices of the batch, which the
learner connector lays out episode by episode: with ``minibatch_size: 64`` each
of the first epoch's updates sees 64 consecutive steps of one env's episode,
whose advantages are alike.  That epoch is the one closest to the sampling
policy, where PPO's clipping holds least.  PPO's ``shuffle_batch_per_epoch``
(on by default) reads "whether to shuffle the train batch once per epoch".

:class:`ShuffleRows` is a learner connector piece that shuffles each module's
rows once, after RLlib's own pieces and GAE, with the same global numpy
generator RLlib's later shuffles use (seeded by the config's ``seed``).  The
learner appends it where RLlib would shuffle at all: minibatches, more than one
epoch, ``shuffle_batch_per_epoch`` on.  A stateful (recurrent) module's batch
is in sequences and stays as it is, as does any batch with a column that is not
one row per step.

``advantage_normalization: minibatch`` (RLlib's ``learner_config_dict``) standardizes
the advantages again within each minibatch, over its rows that count in the loss,
before RLlib's loss reads them, as Stable-Baselines3 and CleanRL do.  RLlib's GAE
connector standardizes them once over the whole train batch (``batch``, the default),
so a minibatch of 64 rows carries whatever mean its rows happen to have, and the
clipped objective pushes all of its actions' probabilities up or down together.

``clip_param`` as a schedule ``[[timestep, value], ...]`` (mlagents-learn's ``epsilon_schedule:
linear``, which decays PPO's clip from ``epsilon`` to 0.1 at ``max_steps``; RLlib's learner keeps
``clip_param`` constant) reaches the learner as ``learner_config_dict``'s :data:`CLIP_SCHEDULE`:
the loss reads the clip at the current timestep, as RLlib's reads ``entropy_coeff``'s schedule.

Reward signals (``reward_signals:``, :mod:`envsdk.training.substitutes.ppo.signals`): RLlib's GAE
piece is replaced by :class:`~envsdk.training.substitutes.ppo.signals.SignalAdvantages`, the next
observations are added to the batch, a policy with signals learns one value head per signal (the
value loss the mean of the heads' losses, as ML-Agents'), and each ``<policy>@reward_signals``
module learns its models with one Adam per signal at the signal's ``learning_rate``, as every
learner with signals does (:class:`~envsdk.training.substitutes.reward_signals.SignalModelsLearner`).

Everything else (the loss, metrics, optimizers, checkpoint contents) is RLlib's.
LunarLander PPO with RL Zoo's settings: configs/lunarlander-ppo.yaml and benchmarks/RESULTS.md.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import numpy as np
import torch
import tree
from ray.rllib.algorithms.ppo.ppo import (
    LEARNER_RESULTS_CURR_ENTROPY_COEFF_KEY,
    LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY,
    LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY,
)
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner as RLlibPPOTorchLearner
from ray.rllib.connectors.common.add_observations_from_episodes_to_batch import (
    AddObservationsFromEpisodesToBatch,
)
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.connectors.learner.add_next_observations_from_episodes_to_train_batch import (
    AddNextObservationsFromEpisodesToTrainBatch,
)
from ray.rllib.connectors.learner.general_advantage_estimation import GeneralAdvantageEstimation
from ray.rllib.core.columns import Columns
from ray.rllib.core.learner.learner import VF_LOSS_KEY
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.metrics import NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.schedules.scheduler import Scheduler
from ray.rllib.utils.torch_utils import explained_variance
from ray.rllib.utils.typing import ModuleID

from envsdk import internals
from envsdk.networks.reward_signals import RewardSignalsModule
from envsdk.training.hooks import agent_step_clock
from envsdk.training.substitutes.ppo import cloning
from envsdk.training.substitutes.ppo.signals import SignalAdvantages, signals_of
from envsdk.training.substitutes.reward_signals import SignalModelsLearner, mark_episode_ends

ADVANTAGE_NORMALIZATION = "advantage_normalization"  # the learner_config_dict key
ADVANTAGE_NORMALIZATIONS = ("batch", "minibatch")  # RLlib's first
CLIP_SCHEDULE = "clip_param_schedule"  # the learner_config_dict key: [[timestep, clip], ...]
CURRENT_CLIP = "curr_clip_param"  # the learner's result key, beside RLlib's curr_entropy_coeff


def shuffles(config: Any) -> bool:
    """Whether RLlib's learner shuffles this config's train batch between epochs."""
    return bool(config.shuffle_batch_per_epoch and config.minibatch_size and config.num_epochs > 1)


class ShuffleRows(ConnectorV2):
    """Learner connector: each non-stateful module's rows in one random order, every column alike."""

    def __call__(self, *, rl_module: Any, batch: dict[str, Any], **kwargs: Any) -> Any:
        for module_id, columns in batch.items():
            if module_id in rl_module and rl_module[module_id].is_stateful():
                continue
            rows = {_rows(leaf) for leaf in tree.flatten(columns)}
            if len(rows) != 1 or -1 in rows:
                continue  # not one row per step in every column: left in RLlib's order
            batch[module_id] = tree.map_structure(
                functools.partial(_taken, np.random.permutation(rows.pop())), columns
            )
        return batch


def _rows(leaf: Any) -> int:
    """A column's rows (-1: not an array with rows)."""
    return len(leaf) if isinstance(leaf, (torch.Tensor, np.ndarray)) and leaf.ndim else -1


def _taken(order: np.ndarray, leaf: Any) -> Any:
    return leaf[torch.from_numpy(order).to(leaf.device)] if isinstance(leaf, torch.Tensor) else leaf[order]


def standardized(advantages: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """``advantages`` less their mean, over their std (SB3's: unbiased, plus 1e-8), both taken
    over the rows ``mask`` keeps; as they are where fewer than two rows count."""
    counted = advantages if mask is None else advantages[mask]
    if counted.numel() < 2:
        return advantages
    return (advantages - counted.mean()) / (counted.std() + 1e-8)


def heads_losses(
    values: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor | None, clip: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(values shaped as targets, each head's clipped loss, the unclipped mean)``: RLlib's value
    loss term (squared error clipped at ``clip``) per head, over the rows ``mask`` keeps.  ``targets``
    have a last axis of heads; RLlib's ``compute_values`` drops it where there is one head."""
    values = values.reshape(targets.shape)
    weight = torch.ones(values.shape[:-1], device=values.device) if mask is None else mask.float()
    squared = (values - targets) ** 2
    rows = weight.sum().clamp(min=1.0)
    per_head = (squared.clamp(0, clip) * weight[..., None]).sum(dim=tuple(range(squared.dim() - 1))) / rows
    unclipped = (squared * weight[..., None]).sum() / (rows * squared.shape[-1])
    return values, per_head, unclipped


class PPOTorchLearner(SignalModelsLearner, RLlibPPOTorchLearner):
    """RLlib's PPO learner; the train batch shuffled before the first epoch as before the others,
    and advantages normalized per minibatch with ``advantage_normalization: minibatch``."""

    def build(self) -> None:
        super().build()
        self.per_minibatch = self.config.learner_config_dict.get(ADVANTAGE_NORMALIZATION) == "minibatch"
        self.clip_schedulers: dict[ModuleID, Scheduler] = {}  # modules whose clip follows a schedule
        pipeline = internals.learner_connector(self)
        # A policy with value heads (reward signals, or the env's reward at another strength or
        # gamma) takes the GAE per signal, whether or not it has a signal model to learn.
        if pipeline is not None and any(signals_of(m) is not None for m in self.module.values()):
            pipeline.insert_after(
                AddObservationsFromEpisodesToBatch, AddNextObservationsFromEpisodesToTrainBatch()
            )
            config: Any = self.config  # a PPOConfig (lambda_)
            gae = SignalAdvantages(gamma=config.gamma, lambda_=config.lambda_)
            pipeline.insert_after(GeneralAdvantageEstimation, gae)
            pipeline.remove(GeneralAdvantageEstimation.__name__)
        mark_episode_ends(pipeline, self.module)  # GAIL's done flag with use_actions
        if pipeline is not None and shuffles(self.config):
            pipeline.append(ShuffleRows())
        self.cloning = cloning.for_learner(self)

    def compute_loss_for_module(
        self, *, module_id: ModuleID, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> Any:
        """RLlib's PPO loss (with the changes the module's docstring names) plus, for a policy with
        reward signals, the mean of its value heads' losses; a reward-signals module's own loss.
        A policy's loss is a sum of terms: a further one (behavioral cloning's) is one more term."""
        module = self.module[module_id].unwrapped()
        if isinstance(module, RewardSignalsModule):
            return self.signals_loss(module_id, batch)
        if signals_of(module) is None:
            return self._policy_loss(module_id, config, batch, fwd_out)
        without_critic = copy.copy(config)
        without_critic.use_critic = False  # RLlib's loss without its one-value term: the heads' instead
        policy = self._policy_loss(module_id, without_critic, batch, fwd_out)
        # after RLlib's loss, which logs its vf metrics as zeros without a critic: the heads' are kept
        return policy + self._value_heads_loss(module_id, module, config, batch, fwd_out)

    def _value_heads_loss(
        self, module_id: ModuleID, module: Any, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> Any:
        """ML-Agents' value loss over heads (the mean of each head's), each head's term RLlib's
        (squared error, clipped at vf_clip_param), masked as RLlib masks."""
        targets = batch[Postprocessing.VALUE_TARGETS]  # one column per head
        values = module.compute_values(batch, embeddings=fwd_out.get(Columns.EMBEDDINGS))
        values, per_head, unclipped = heads_losses(
            values, targets, batch.get(Columns.LOSS_MASK), config.vf_clip_param
        )
        self.metrics.log_dict(
            {
                VF_LOSS_KEY: per_head.mean(),
                LEARNER_RESULTS_VF_LOSS_UNCLIPPED_KEY: unclipped,
                LEARNER_RESULTS_VF_EXPLAINED_VAR_KEY: explained_variance(targets.flatten(), values.flatten()),
            },
            key=module_id,
            window=1,
        )
        return config.vf_loss_coeff * per_head.mean()

    def _policy_loss(
        self, module_id: ModuleID, config: Any, batch: dict[str, Any], fwd_out: dict[str, Any]
    ) -> Any:
        if self.per_minibatch:
            advantages = standardized(batch[Postprocessing.ADVANTAGES], batch.get(Columns.LOSS_MASK))
            batch = {**batch, Postprocessing.ADVANTAGES: advantages}
        scheduler = self._clip_scheduler(module_id, config)
        if scheduler is not None:
            config = copy.copy(config)  # RLlib's loss reads config.clip_param; the module's config stays
            config.clip_param = float(scheduler.get_current_value())
        return super().compute_loss_for_module(
            module_id=module_id, config=config, batch=batch, fwd_out=fwd_out
        )

    def _clip_scheduler(self, module_id: ModuleID, config: Any) -> Scheduler | None:
        schedule = config.learner_config_dict.get(CLIP_SCHEDULE)
        if schedule is None:
            return None
        if module_id not in self.clip_schedulers:
            self.clip_schedulers[module_id] = Scheduler(schedule, framework=self.framework)
        return self.clip_schedulers[module_id]

    def after_gradient_based_update(self, *, timesteps: dict[str, Any]) -> None:
        """RLlib's, then each policy's lr, entropy and clip schedules stepped by its own agent steps
        where the agent-step clock gives them (:data:`agent_step_clock.MODULE_CLOCK`): RLlib steps
        every policy's by one timestep, mlagents-learn each behavior's by its own."""
        super().after_gradient_based_update(timesteps=timesteps)
        own = timesteps.get(agent_step_clock.MODULE_CLOCK) or {}
        metrics: Any = self.metrics  # RLlib annotates delete(*key) as tuples; it takes the key's parts
        for module_id in sorted(set(own) | set(self.clip_schedulers)):
            if module_id not in self.module:
                continue
            step = own.get(module_id, timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))
            if module_id in own:
                for metric, optimizer, schedule in internals.module_lr_schedules(self, module_id):
                    lr = schedule.update(timestep=step)
                    internals.set_optimizer_lr(self, optimizer, lr)
                    metrics.delete(module_id, metric, key_error=False)  # RLlib's, of the shared step
                    metrics.log_value((module_id, metric), lr, reduce="mean")
                entropy = self.entropy_coeff_schedulers_per_module[module_id].update(timestep=step)
                self.metrics.log_value((module_id, LEARNER_RESULTS_CURR_ENTROPY_COEFF_KEY), entropy, window=1)
            scheduler = self.clip_schedulers.get(module_id)
            if scheduler is not None:
                self.metrics.log_value((module_id, CURRENT_CLIP), scheduler.update(timestep=step), window=1)
        for module_id, bc in self.cloning.items():  # after the policy's update, as ML-Agents' BC module
            step = own.get(module_id, timesteps.get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))
            for name, value in bc.update(int(step)).items():
                self.metrics.log_value((module_id, cloning.KEY, name), value, window=1)
