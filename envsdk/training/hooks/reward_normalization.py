"""``normalize_rewards: true``: rewards scaled by the std of the discounted return, in the learner.

A value function learns faster when its targets are near unit scale.  Acrobot
pays -1 a step, so its discounted returns sit near -60 to -100, and PPO with
raw rewards needs about 3x the env steps (RL Zoo runs the same recipe with
Stable-Baselines3's ``VecNormalize``).  :class:`RewardNormalizer` does what
``VecNormalize`` does to rewards: it keeps the running discounted return of
each episode, the running std of those returns, and divides each reward by
that std (no mean is taken off, so a reward keeps its sign), then clips.

It is a learner connector piece, so the env runners, the episode returns in
every metric, stop criteria and evaluation all see the env's own rewards; only
the rewards the loss sees (and GAE's value targets) are scaled.  It runs
before RLlib's default pieces and fills the batch's ``rewards`` column, which
RLlib's ``AddColumnsFromEpisodesToTrainBatch`` then leaves alone.

Only on-policy algorithms take it (:data:`ALGORITHMS`): their learner sees
each sampled step once, in order, which the running return needs.  Replayed
transitions (DQN, SAC) are out of order and seen many times.

The statistics live in the learner.  RLlib's checkpoints do not save learner
connector state, so a resumed run starts them again from its first batch.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.core.columns import Columns

from envsdk.training.hooks.observation_filter import RunningMeanStd

ALGORITHMS = ("PPO", "APPO", "IMPALA")
SMALL_NUMBER = 1e-8  # added to the variance before the square root, as VecNormalize does
OPEN_RETURNS = 10_000  # running returns kept for episodes that may continue in a later batch


class RewardNormalizer(ConnectorV2):
    """Learner connector: each reward / std(running discounted return), clipped to ``±clip``.

    Statistics are per module (``None`` in single-agent runs).  An episode cut
    into chunks across batches keeps its running return from one chunk to the
    next; the most recent :data:`OPEN_RETURNS` are kept.
    """

    def __init__(
        self,
        input_observation_space: Any = None,
        input_action_space: Any = None,
        *,
        gamma: float,
        clip: float = 10.0,
        **kwargs: Any,
    ):
        super().__init__(input_observation_space, input_action_space, **kwargs)
        self.gamma = gamma
        self.clip = clip
        self.stats: dict[Any, RunningMeanStd] = {}
        self._open: collections.OrderedDict[tuple[Any, Any], float] = collections.OrderedDict()

    def __call__(self, *, batch: dict[str, Any], episodes: list, **kwargs: Any) -> Any:
        chunks = []
        for episode in self.single_agent_episode_iterator(episodes, agents_that_stepped_only=False):
            rewards = np.asarray(episode.get_rewards(slice(0, len(episode))), dtype=np.float64)
            self._push(episode, rewards)
            chunks.append((episode, rewards))
        for episode, rewards in chunks:  # scaled by the statistics that include this batch
            std = np.sqrt(self.variance(episode.module_id) + SMALL_NUMBER)
            scaled = np.clip(rewards / std, -self.clip, self.clip).astype(np.float32)
            self.add_n_batch_items(
                batch,
                Columns.REWARDS,
                items_to_add=scaled,
                num_items=len(episode),
                single_agent_episode=episode,
            )
        return batch

    def variance(self, module_id: Any) -> float:
        """The running (population) variance of the discounted return that rewards are scaled by."""
        stats = self.stats.get(module_id)
        return float(stats.m2 / stats.count) if stats is not None and stats.count else 1.0

    def _push(self, episode: Any, rewards: np.ndarray) -> None:
        """Add the chunk's running discounted returns to its module's statistics."""
        key = (getattr(episode, "multi_agent_episode_id", None) or episode.id_, episode.agent_id)
        running = self._open.pop(key, 0.0) if episode.t_started > 0 else 0.0
        returns = np.empty_like(rewards)
        for i, reward in enumerate(rewards):
            running = running * self.gamma + reward
            returns[i] = running
        self._open[key] = running
        while len(self._open) > OPEN_RETURNS:
            self._open.popitem(last=False)
        if len(returns):
            chunk = RunningMeanStd.of(returns)
            self.stats.setdefault(episode.module_id, RunningMeanStd.empty(())).merge(chunk)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict:
        return {"stats": dict(self.stats)}

    def set_state(self, state: dict) -> None:
        self.stats = dict(state["stats"])

    def reset_state(self) -> None:
        self.stats = {}
        self._open.clear()


def on_policy_configs() -> tuple[type, ...]:
    """The config classes of :data:`ALGORITHMS` (APPO's derives from IMPALA's), for ``isinstance``."""
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.algorithms.ppo import PPOConfig

    return (PPOConfig, IMPALAConfig)


def reward_normalizer(observation_space: Any, action_space: Any, *, gamma: float) -> RewardNormalizer:
    """``learner_connector`` for ``normalize_rewards: true`` (picklable with ``functools.partial``)."""
    return RewardNormalizer(observation_space, action_space, gamma=gamma)
