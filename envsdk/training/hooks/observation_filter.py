"""``observation_filter: MeanStdFilter`` on the new API stack: training, evaluation, export.

Ray 1.x normalised observations with ``observation_filter: MeanStdFilter``.
On the new API stack that is an env-to-module connector whose running
statistics are saved with each checkpoint's env runner.  RLlib's own
``MeanStdFilter`` connector handles a flat ``Box`` only: a ``Dict`` or
``Tuple`` observation, a ``Discrete`` one or a ``uint8`` image breaks it, and
it would normalise an action mask.  :class:`ObservationMeanStdFilter` is the
same idea for every space: each float ``Box`` part is normalised with its own
running mean and std, everything else passes as it is.

:func:`mean_std_filter` builds it, :func:`freeze_observation_filter` freezes it
for evaluation (rollout.py uses the trained statistics as they are, and keeps
the raw observations that the connector overwrites in RLlib's episodes), and
:func:`saved_statistics` reads a checkpoint's statistics back so that exports
can apply them in the graph.
"""

from __future__ import annotations

import copy
import functools
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tree as dm_tree
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.utils.spaces.space_utils import batch, get_base_struct_from_space

from envsdk.envs.base import MASK_KEY, OBS_KEY, has_action_mask
from envsdk.envs.spaces import inner_space, observation_leaves
from envsdk.errors import UserError
from envsdk.internals import PIECE_CLASS_FILE, PIECE_STATE_FILE, connector_pieces, env_to_module_connector

RAW_OBSERVATIONS = "envsdk_raw_observations"  # SingleAgentEpisode.custom_data key (evaluation)
SMALL_NUMBER = 1e-8  # added to the std before dividing, as Ray 1.x did

Path_ = tuple[Any, ...]  # a part's path in the observation nest (dict keys, tuple indices)


def _normalised(path: Path_, space: gym.Space) -> bool:
    """Which observation parts the filter normalises: float ``Box`` parts other than an action mask.

    Integer images and masks stay as they are, as Ray 1.x's preprocessors left
    them usable; discrete parts have nothing to normalise.
    """
    return (
        isinstance(space, gym.spaces.Box)
        and np.issubdtype(space.dtype, np.floating)
        and not (path and path[-1] == MASK_KEY)
    )


def _as_space(struct: Any) -> gym.Space:
    """A nest of leaf spaces (dicts, tuples) back into a ``gym.Space``."""
    if isinstance(struct, dict):
        return gym.spaces.Dict({k: _as_space(v) for k, v in struct.items()})
    if isinstance(struct, tuple):
        return gym.spaces.Tuple(tuple(_as_space(v) for v in struct))
    assert isinstance(struct, gym.Space), struct
    return struct


def _space_of(observation: Any) -> gym.Space:
    """A space of ``observation``'s shapes and dtypes, bounded only by its dtype: for an agent the env
    names no space for (a Unity game's agents are new each episode), enough to tell which parts are
    normalised."""

    def leaf(x: Any) -> gym.spaces.Box:
        value = np.asarray(x)
        dtype: Any = np.int8 if value.dtype == np.bool_ else value.dtype
        low, high = (
            (-np.inf, np.inf)
            if np.issubdtype(dtype, np.floating)
            else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        )
        return gym.spaces.Box(low, high, value.shape, dtype)

    return _as_space(dm_tree.map_structure(leaf, observation))


@dataclass
class RunningMeanStd:
    """Count, mean and sum of squared deviations of one observation part (Welford; Chan et al. to merge)."""

    count: int
    mean: np.ndarray
    m2: np.ndarray

    @classmethod
    def empty(cls, shape: tuple[int, ...]) -> RunningMeanStd:
        return cls(0, np.zeros(shape), np.zeros(shape))

    @classmethod
    def of(cls, values: np.ndarray) -> RunningMeanStd:
        """The statistics of ``values`` along their first axis."""
        mean = values.mean(axis=0)
        return cls(len(values), mean, ((values - mean) ** 2).sum(axis=0))

    def push(self, x: np.ndarray) -> None:
        self.count += 1
        delta = x - self.mean
        self.mean = self.mean + delta / self.count
        self.m2 = self.m2 + delta * (x - self.mean)

    def merge(self, other: RunningMeanStd) -> None:
        if other.count == 0:
            return
        total = self.count + other.count
        delta = other.mean - self.mean
        self.mean = self.mean + delta * (other.count / total)
        self.m2 = self.m2 + other.m2 + delta**2 * (self.count * other.count / total)
        self.count = total

    @property
    def std(self) -> np.ndarray:
        """The sample std (0 until two values were seen), as Ray 1.x's filter had it."""
        return np.sqrt(self.m2 / (self.count - 1)) if self.count > 1 else np.zeros_like(self.mean)


@dataclass
class _AgentStats:
    """One agent's statistics per normalised part: all seen (``seen``) and since the last sync (``fresh``)."""

    seen: dict[Path_, RunningMeanStd]
    fresh: dict[Path_, RunningMeanStd] = field(default_factory=dict)

    @classmethod
    def for_space(cls, space: gym.Space) -> _AgentStats:
        leaves = dm_tree.flatten_with_path(get_base_struct_from_space(space))
        return cls({path: RunningMeanStd.empty(s.shape) for path, s in leaves if _normalised(path, s)})

    def restart_fresh(self) -> None:
        self.fresh = {path: RunningMeanStd.empty(s.mean.shape) for path, s in self.seen.items()}


class ObservationMeanStdFilter(ConnectorV2):
    """Normalise each float ``Box`` part of the observation by its running mean and std, then clip.

    Per policy (``None`` in single-agent runs), as Ray 1.x kept a filter per policy and ML-Agents'
    ``normalize`` keeps statistics per behavior: every agent of a policy shares them, and an agent
    that is new each episode (a Unity game's) adds to its policy's statistics.  ``update_stats``: learn the
    statistics from what passes (training) or use them as they are
    (evaluation).  ``keep_raw``: first keep each raw observation in the
    episode's custom data.  One class for training and evaluation, because a
    checkpoint's connector state is restored by class name.

    State: per agent and part, the statistics seen in all and those seen since
    the last sync.  Syncing adds each remote env runner's fresh statistics to
    the driver's and sends the sum back to every runner.
    """

    def __init__(
        self,
        input_observation_space: gym.Space | None = None,
        input_action_space: gym.Space | None = None,
        *,
        multi_agent: bool = False,
        clip_by_value: float | None = 10.0,
        update_stats: bool = True,
        keep_raw: bool = False,
        **kwargs: Any,
    ):
        self._multi_agent = multi_agent
        self.clip_by_value = clip_by_value
        self._update_stats = update_stats
        self.keep_raw = keep_raw
        self._agents: dict[Any, _AgentStats] = {}  # policy id (None: single-agent) -> statistics
        self._spaces: dict[Any, gym.Space] = {}  # policy id -> its filtered observation space
        self._per_agent: dict[
            Any, _AgentStats
        ] = {}  # a checkpoint's per-agent statistics (envsdk 0.3 and earlier)
        super().__init__(input_observation_space, input_action_space, **kwargs)

    def recompute_output_observation_space(
        self, input_observation_space: gym.Space, input_action_space: gym.Space
    ) -> gym.Space:
        if self._multi_agent and isinstance(input_observation_space, gym.spaces.Dict):
            return gym.spaces.Dict({a: self._filtered(s) for a, s in input_observation_space.spaces.items()})
        return self._filtered(input_observation_space)

    def _filtered(self, space: gym.Space) -> gym.Space:
        """``space`` with each normalised part bounded by the clip."""
        clip = self.clip_by_value or np.inf
        struct = dm_tree.map_structure_with_path(
            lambda path, s: gym.spaces.Box(-clip, clip, s.shape, s.dtype) if _normalised(path, s) else s,
            get_base_struct_from_space(space),
        )
        return _as_space(struct)

    def _stats(self, key: Any, space: gym.Space, agent_id: Any = None) -> _AgentStats:
        """The statistics of policy ``key``, made from the first observation space it is seen with
        (an agent's own: a Unity game's agents are new each episode, so not in the env's spaces)."""
        if key not in self._agents:
            self._agents[key] = self._per_agent.get(agent_id) or _AgentStats.for_space(space)
            self._agents[key].restart_fresh()
            self._spaces[key] = self._filtered(space)
        return self._agents[key]

    def __call__(self, *, episodes: list, batch: Any, **kwargs: Any) -> Any:
        for episode in self.single_agent_episode_iterator(episodes):
            raw = episode.get_observations(indices=-1)
            if self.keep_raw:
                episode.custom_data.setdefault(RAW_OBSERVATIONS, []).append(raw)
            key = episode.module_id if self._multi_agent else None
            space = episode.observation_space if self._multi_agent else self.input_observation_space
            stats = self._stats(key, space or _space_of(raw), episode.agent_id)
            normalised = dm_tree.map_structure_with_path(functools.partial(self._normalise, stats), raw)
            if space is not None:  # the episode's buffers batch (and pad) by its space: the filtered one now
                episode.observation_space = self._spaces[key]
            episode.set_observations(at_indices=-1, new_data=normalised)
        return batch  # RLlib's default connectors batch the episodes' (now normalised) observations

    def normalise_rows(self, key: Any, space: gym.Space, rows: list[Any]) -> list[Any]:
        """Several observations of policy ``key`` at once (a loop that steps many agents: one
        frame's), as many calls of the connector would normalise them one after another, but for
        the order within the frame: the statistics take in all of them before any is normalised."""
        stats = self._stats(key, space)

        def part(path: Path_, x: Any) -> Any:
            if path not in stats.seen:
                return x
            x = np.asarray(x)
            if self._update_stats:
                frame = RunningMeanStd.of(x.astype(np.float64))  # merge() only reads it
                stats.seen[path].merge(frame)
                stats.fresh[path].merge(frame)
            return self._scaled(stats.seen[path], x)

        normalised = dm_tree.map_structure_with_path(part, batch(rows))
        return [dm_tree.map_structure(lambda x, i=i: x[i], normalised) for i in range(len(rows))]

    def filtered_space(self, key: Any) -> gym.Space:
        """Policy ``key``'s observation space as the filter leaves it (once it has normalised any)."""
        return self._spaces[key]

    def _normalise(self, stats: _AgentStats, path: Path_, x: Any) -> Any:
        if path not in stats.seen:
            return x
        x = np.asarray(x)
        if self._update_stats:
            stats.seen[path].push(x)
            stats.fresh[path].push(x)
        return self._scaled(stats.seen[path], x)

    def _scaled(self, part: RunningMeanStd, x: np.ndarray) -> Any:
        """``x`` (one observation part, or rows of it) by the part's mean and std, then clipped."""
        out = (x - part.mean) / (part.std + SMALL_NUMBER)
        if self.clip_by_value:
            out = np.clip(out, -self.clip_by_value, self.clip_by_value)
        return out.astype(x.dtype)

    def get_state(self, components: Any = None, *, not_components: Any = None, **kwargs: Any) -> dict:
        return {
            "clip_by_value": self.clip_by_value,
            "keyed_by": "policy",
            "spaces": dict(self._spaces),
            "agents": {
                agent_id: {"seen": _copied(stats.seen), "fresh": _copied(stats.fresh)}
                for agent_id, stats in self._agents.items()
            },
        }

    def set_state(self, state: dict) -> None:
        self.clip_by_value = state["clip_by_value"]
        saved = {key: _AgentStats(dict(s["seen"])) for key, s in state["agents"].items()}
        if self._multi_agent and state.get("keyed_by") != "policy":
            # A checkpoint of envsdk 0.3 or earlier kept multi-agent statistics per agent id: each policy
            # starts from those of the first of its agents seen (see _stats).
            self._agents, self._spaces, self._per_agent = {}, {}, saved
            return
        self._agents, self._spaces = saved, dict(state.get("spaces") or {})
        for key, stats in self._agents.items():
            stats.restart_fresh()
            if key not in self._spaces and not self._multi_agent:
                self._spaces[key] = self._filtered(self.input_observation_space)

    def reset_state(self) -> None:
        self._agents, self._spaces = {}, {}

    def merge_states(self, states: list[dict]) -> dict:
        """The driver's statistics plus what each remote env runner saw since the last sync."""
        for state in states:
            for key, space in (state.get("spaces") or {}).items():
                self._spaces.setdefault(key, space)
            for key, remote in state["agents"].items():
                if key not in self._agents:  # the driver has not seen this policy: its first statistics
                    self._agents[key] = _AgentStats(
                        {p: RunningMeanStd.empty(f.mean.shape) for p, f in remote["fresh"].items()}
                    )
                stats = self._agents[key]
                for path, fresh in remote["fresh"].items():
                    stats.seen[path].merge(fresh)
        for stats in self._agents.values():
            stats.restart_fresh()
        return self.get_state()


def _copied(parts: dict[Path_, RunningMeanStd]) -> dict[Path_, RunningMeanStd]:
    return {path: copy.copy(part) for path, part in parts.items()}  # push() and merge() replace arrays


def mean_std_filter(
    env: Any, spaces: Any, device: Any, *, multi_agent: bool, evaluation: bool = False
) -> ObservationMeanStdFilter:
    """``env_to_module_connector`` for ``observation_filter: MeanStdFilter`` (picklable).

    ``evaluation``: the trained statistics stay as they are, and each episode
    keeps its raw observations under :data:`RAW_OBSERVATIONS` (the filter
    overwrites them in the episode), for rollout.py's experience file.
    """
    return ObservationMeanStdFilter(multi_agent=multi_agent, update_stats=not evaluation, keep_raw=evaluation)


def is_mean_std_filter(made: Any) -> bool:
    """Whether an ``env_to_module_connector`` is :func:`mean_std_filter`'s (for training)."""
    return isinstance(made, functools.partial) and made.func is mean_std_filter


def freeze_observation_filter(config: Any) -> None:
    """Evaluate with the trained MeanStdFilter statistics as they are, keeping raw observations."""
    made = env_to_module_connector(config)
    if is_mean_std_filter(made):
        config.env_runners(env_to_module_connector=functools.partial(made, evaluation=True))


@dataclass(frozen=True)
class Statistics:
    """A trained filter's statistics: per normalised observation part (by path), mean and std."""

    stats: dict[Path_, tuple[np.ndarray, np.ndarray]]
    clip: float | None

    def apply(self, path: Path_, x: torch.Tensor) -> torch.Tensor:
        """What the connector does to part ``path``, in torch (for exported graphs)."""
        if path not in self.stats:
            return x
        mean, std = (torch.as_tensor(v, dtype=torch.float32) for v in self.stats[path])
        x = (x.float() - mean) / (std + SMALL_NUMBER)
        return torch.clamp(x, -self.clip, self.clip) if self.clip else x


def saved_statistics(restored: Any, module: Any, module_id: str | None = None) -> Statistics | None:
    """The observation filter's statistics of policy ``module_id`` (multi-agent runs), saved with the
    checkpoint's env runner, if it has a filter."""
    piece = next((p for p in connector_pieces(restored.checkpoint) if _is_filter(p)), None)
    if piece is None:
        return None
    state = pickle.loads((piece / PIECE_STATE_FILE).read_bytes())
    if restored.multi_agent and state.get("keyed_by") != "policy":
        raise UserError(
            "this run's MeanStdFilter keeps statistics per agent, not per policy"
            " (a checkpoint of envsdk 0.3 or earlier)",
            "train again (statistics are now kept per policy) to export a multi-agent policy",
            "observation filter",
        )
    key = module_id if restored.multi_agent else None
    seen = state["agents"].get(key, {}).get("seen", {})
    space = module.observation_space
    prefix = (OBS_KEY,) if has_action_mask(space) else ()  # saved for the whole (masked) observation
    stats = {}
    for leaf in observation_leaves(inner_space(space)):
        part = seen.get(prefix + leaf.path)
        if part is not None:
            stats[leaf.path] = (np.asarray(part.mean), np.asarray(part.std))
    return Statistics(stats, state["clip_by_value"])


def _is_filter(piece: Path) -> bool:
    return issubclass(
        pickle.loads((piece / PIECE_CLASS_FILE).read_bytes())["class"], ObservationMeanStdFilter
    )
