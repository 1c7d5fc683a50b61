"""Reward signals in PPO's learner: each signal's reward, its own value head and discount, and the
advantage summed over them, as ML-Agents' PPO computes them.

:class:`SignalAdvantages` takes the place of RLlib's ``GeneralAdvantageEstimation`` learner
connector piece.  For a policy with reward signals (its module's ``model_config`` names them
under :data:`~envsdk.networks.catalogs.VALUE_HEADS`, its value function outputs one value per
signal) it computes, per signal: the reward (the env's for ``extrinsic``, the signal model's
otherwise: :class:`~envsdk.networks.reward_signals.RewardSignalsModule`) times its strength, and
GAE with the signal's gamma on that head's values (RLlib's ``compute_value_targets``; curiosity and
RND bootstrap from an episode's last observation even where it terminated, ML-Agents'
``ignore_done``).  The advantage is the sum of the signals' advantages, standardised as RLlib's
GAE does (ML-Agents takes their mean and standardises too: the same after standardising); the
value targets are one column per head.  Every other module gets RLlib's GAE unchanged.

It also hands the policy's transitions (observation, next observation, action, loss mask) to the
reward-signals module, whose loss the learner computes beside the policy's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from ray.rllib.connectors.learner.general_advantage_estimation import GeneralAdvantageEstimation
from ray.rllib.core.columns import Columns
from ray.rllib.evaluation.postprocessing import Postprocessing
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.postprocessing.value_predictions import compute_value_targets
from ray.rllib.utils.postprocessing.zero_padding import split_and_zero_pad_n_episodes, unpad_data_if_necessary

from envsdk.config.own_keys.reward_signals import EXTRINSIC, RewardSignals
from envsdk.networks.catalogs import VALUE_HEADS
from envsdk.networks.reward_signals import SIGNALS, signals_module_id
from envsdk.training.substitutes.reward_signals import REWARD_SIGNALS, rows_of


def signals_of(module: Any) -> RewardSignals | None:
    """The signals a policy module has value heads for (None: one value, RLlib's GAE)."""
    config = module.model_config or {}
    return RewardSignals.from_config(config[SIGNALS]) if config.get(VALUE_HEADS) else None


def signal_value_targets(
    values: np.ndarray,
    rewards: np.ndarray,
    terminateds: np.ndarray,
    truncateds: np.ndarray,
    signals: RewardSignals,
    lambda_: float,
) -> np.ndarray:
    """Value targets ``(rows, signals)``: GAE per signal with its gamma, on ``values[:, i]`` and
    ``rewards[:, i]`` (already times the signal's strength).  Rows are RLlib's: episodes one after
    another, each extended by a bootstrap step (``AddOneTsToEpisodesAndTruncate``)."""
    columns = []
    for i, signal in enumerate(signals.signals):
        ends = (terminateds, truncateds)
        if signal.ignore_done:  # a termination is a truncation: bootstrap from the last observation
            ends = (
                np.zeros_like(terminateds),
                np.logical_or(terminateds, truncateds).astype(truncateds.dtype),
            )
        columns.append(
            compute_value_targets(values[:, i], rewards[:, i], *ends, gamma=signal.gamma, lambda_=lambda_)
        )
    targets: np.ndarray = np.stack(columns, axis=1)
    return targets


def rllib_standardized(advantages: np.ndarray) -> np.ndarray:
    """RLlib's GAE's standardisation."""
    out: np.ndarray = (advantages - advantages.mean()) / max(1e-4, float(advantages.std()))
    return out


class SignalAdvantages(GeneralAdvantageEstimation):
    """RLlib's GAE for modules with one value; per-signal GAE for modules with reward signals."""

    def __init__(self, *, gamma: float, lambda_: float) -> None:
        super().__init__(gamma=gamma, lambda_=lambda_)  # type: ignore[no-untyped-call]

    def __call__(self, *, rl_module: Any, episodes: list[Any], batch: dict[str, Any], **kwargs: Any) -> Any:
        ours = {mid: batch.pop(mid) for mid in list(batch) if mid in rl_module and signals_of(rl_module[mid])}
        batch = super().__call__(rl_module=rl_module, episodes=episodes, batch=batch, **kwargs)
        episodes_of = list(self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False))
        metrics = kwargs.get("metrics")
        for module_id, columns in ours.items():
            lens = [len(e) for e in episodes_of if e.module_id in (None, module_id)]
            batch[module_id] = columns
            means = self._module_advantages(rl_module, module_id, columns, lens, batch)
            if metrics is not None:
                for name, mean in means.items():
                    metrics.log_value((module_id, REWARD_SIGNALS, name, "reward_mean"), mean, window=1)
        return batch

    def _module_advantages(
        self, rl_module: Any, module_id: str, columns: dict[str, Any], lens: list[int], batch: dict[str, Any]
    ) -> dict[str, float]:
        """Advantages and value targets into ``columns``; the signals module's batch into ``batch``.
        Returns each signal's mean reward (times its strength) over the steps that count."""
        module = rl_module[module_id]
        signals = signals_of(module)
        assert signals is not None
        stateful = module.is_stateful()
        with torch.no_grad():
            values = module.compute_values(columns)
        device = values.device

        def unpadded(value: Any) -> np.ndarray:
            """Rows of real steps (and bootstrap steps): a stateful module's padding dropped."""
            x: np.ndarray = np.asarray(convert_to_numpy(value))
            if not stateful:
                return x
            if x.ndim == 3:  # (sequences, steps, heads): RLlib unpads one column at a time
                return np.stack(
                    [unpad_data_if_necessary(lens, x[..., i]) for i in range(x.shape[-1])], axis=1
                )
            return np.asarray(unpad_data_if_necessary(lens, x))

        rewards = {EXTRINSIC: columns[Columns.REWARDS]}
        signals_id = signals_module_id(module_id)
        if signals.intrinsic:
            rows = rows_of(columns, np.ndim(columns[Columns.REWARDS]))
            shape = columns[Columns.REWARDS].shape
            rewards.update({k: v.reshape(shape) for k, v in rl_module[signals_id].rewards(rows).items()})
            batch[signals_id] = rows
        scaled = np.stack([unpadded(rewards[s.name]) * s.strength for s in signals.signals], axis=1)
        vf = unpadded(values).reshape(len(scaled), -1)
        targets = signal_value_targets(
            vf,
            scaled,
            unpadded(columns[Columns.TERMINATEDS]).astype(np.float32),
            unpadded(columns[Columns.TRUNCATEDS]).astype(np.float32),
            signals,
            self.lambda_,
        )
        advantages = rllib_standardized((targets - vf).sum(axis=1))
        if stateful:
            seq = module.model_config["max_seq_len"]
            advantages = np.stack(
                split_and_zero_pad_n_episodes(advantages, episode_lens=lens, max_seq_len=seq)
            )
            targets = np.stack(split_and_zero_pad_n_episodes(targets, episode_lens=lens, max_seq_len=seq))
        columns[Postprocessing.ADVANTAGES] = torch.from_numpy(advantages.astype(np.float32)).to(device)
        columns[Postprocessing.VALUE_TARGETS] = torch.from_numpy(targets.astype(np.float32)).to(device)
        counted = unpadded(columns[Columns.LOSS_MASK]).astype(bool) if Columns.LOSS_MASK in columns else None
        kept = scaled if counted is None else scaled[counted]
        return {s.name: float(kept[:, i].mean()) if len(kept) else 0.0 for i, s in enumerate(signals.signals)}
