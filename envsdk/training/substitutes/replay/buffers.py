"""Replay buffers of transitions in flat arrays, sampled straight into a train batch.

RLlib 2.60's ``EpisodeReplayBuffer`` keeps whole episodes and samples each
transition as a one-step ``SingleAgentEpisode`` (a slice of the stored
episode), which the learner's connector pipeline then turns back into a
batch: for SAC's 256 transitions per update that is several times the update
itself (benchmarks/replay.py measures it).  Here every
transition is one row of numpy arrays (observation, action, n-step-able
reward, next observation, terminated, truncated), so a batch is a few fancy
indexing operations.  The semantics are those of RLlib's buffers:

* uniform sampling over stored timesteps, or prioritized sampling (``alpha``
  given) with importance weights ``(N * P(i)) ** -beta`` normalised by the
  largest possible weight, and new transitions at the highest priority seen;
* n-step returns: a row's reward is the discounted sum of up to ``n`` rewards
  of its episode, ``new_obs`` the observation after the last of them,
  ``terminateds``/``truncateds`` that step's flags, and ``n_step`` how many
  steps were summed (fewer where the episode ended or has no later steps
  stored yet, so that the learner bootstraps with ``gamma ** n_step``);
  ``n_step`` may be a ``(low, high)`` range, drawn per row in ``[low, high)``
  as RLlib draws it;
* the oldest transitions are overwritten once ``capacity`` is reached.

An episode arrives in chunks (every ``sample()`` of an env runner ends with
the open episodes cut); consecutive chunks of one episode are linked, so an
n-step return runs across the cut.  Each row records its episode and step,
and a link to an overwritten row is never followed.

:class:`ModuleTransitions` holds one such buffer per RLlib module: a
multi-agent episode's agents each go to their module's buffer (an agent's own
steps: its observation, action, the rewards until it next observes, and that
next observation), and each module is sampled on its own, as RLlib's
multi-agent buffers do in their ``independent`` replay mode.
"""

from __future__ import annotations

import zlib
from collections.abc import Collection
from typing import Any, TypedDict

import numpy as np
import tree  # dm-tree, which RLlib uses for nested observations and actions

from envsdk.errors import UserError

# Columns of the train batch, as RLlib's learner connectors name them (ray.rllib.core.columns.Columns).
OBS, NEXT_OBS, ACTIONS, REWARDS = "obs", "new_obs", "actions", "rewards"
TERMINATEDS, TRUNCATEDS, N_STEP, WEIGHTS = "terminateds", "truncateds", "n_step", "weights"
PRIORITY_EPSILON = 1e-6  # added to |TD error|, as RLlib's prioritized buffers do


class TrainBatch(TypedDict):
    """One module's sampled rows, by column (the names above): what
    ``training_step.TransitionReplay`` hands the learner as a ``SampleBatch``.  ``obs``,
    ``new_obs`` and ``actions`` are nested as the spaces are (arrays at the leaves)."""

    obs: Any
    actions: Any
    rewards: np.ndarray  # float32: the discounted sum of up to n_step rewards
    new_obs: Any
    terminateds: np.ndarray
    truncateds: np.ndarray
    n_step: np.ndarray  # int64: how many rewards were summed
    weights: np.ndarray  # float32: importance weights (ones where not prioritized)


class SumTree:
    """Priorities of ``size`` slots in a binary tree of sums, searched for many draws at once."""

    def __init__(self, size: int) -> None:
        self.leaves = 1
        while self.leaves < size:
            self.leaves *= 2
        self.tree = np.zeros(2 * self.leaves)

    def set(self, slots: np.ndarray, values: np.ndarray) -> None:
        nodes = np.asarray(slots) + self.leaves
        if len(nodes) == 0:
            return
        self.tree[nodes] = values
        nodes = np.unique(nodes // 2)
        while nodes[0] >= 1:
            self.tree[nodes] = self.tree[2 * nodes] + self.tree[2 * nodes + 1]
            if nodes[0] == 1:
                break
            nodes = np.unique(nodes // 2)

    @property
    def total(self) -> float:
        return float(self.tree[1])

    def get(self, slots: np.ndarray) -> np.ndarray:
        return np.asarray(self.tree[np.asarray(slots) + self.leaves])

    def find(self, masses: np.ndarray) -> np.ndarray:
        """The slot whose cumulative priority interval holds each mass (each in ``[0, total)``)."""
        nodes = np.ones(len(masses), dtype=np.int64)
        masses = masses.copy()
        while nodes[0] < self.leaves:
            left = self.tree[2 * nodes]
            right = masses >= left
            masses -= left * right
            nodes = 2 * nodes + right
        return nodes - self.leaves


class TransitionReplayBuffer:
    """Transitions of single-agent episodes, sampled as a train batch (see the module docstring).

    Built by RLlib from ``replay_buffer_config`` (``capacity``, ``alpha`` for
    prioritized replay; other keys of RLlib's buffers are accepted and unused).
    """

    def __init__(
        self,
        capacity: int = 10_000,
        *,
        alpha: float | None = None,
        seed: int | list[int] | None = None,
        **_: Any,
    ):
        if capacity < 1:
            raise UserError(
                f"replay_buffer_config: capacity must be at least 1, got {capacity}",
                "set replay_buffer_config: {capacity: N} with N >= 1",
            )
        self.capacity = int(capacity)
        self.alpha = alpha
        self.rng = np.random.default_rng(seed)
        self._columns: dict[str, Any] | None = None  # nested arrays, allocated on the first add
        self._allocated = 0
        self.size = 0  # rows filled
        self._next_row = 0  # where the next transition goes (the oldest row once full)
        # Per row: which episode (a number per episode id), its step in that episode, and the row of
        # its episode's next step (-1 until that step arrives).
        self._episode = np.zeros(0, dtype=np.int64)
        self._step = np.zeros(0, dtype=np.int64)
        self._successor = np.zeros(0, dtype=np.int64)
        self._open: dict[str, tuple[int, int, int]] = {}  # episode id -> (number, last row, last step)
        self._episodes_seen = 0
        self._priorities = SumTree(self.capacity) if alpha is not None else None
        self._max_priority = 1.0
        self._last_rows = np.zeros(0, dtype=np.int64)
        self.added_lifetime = 0
        self.sampled_lifetime = 0

    def __len__(self) -> int:
        return self.size

    @property
    def prioritized(self) -> bool:
        return self._priorities is not None

    # ---- adding -----------------------------------------------------------------------------------

    def add(self, episodes: Any) -> None:
        """Store every step of these (numpy'd) ``SingleAgentEpisode`` chunks."""
        for episode in episodes if isinstance(episodes, list | tuple) else [episodes]:
            self._add_chunk(episode)

    def _add_chunk(self, episode: Any) -> None:
        steps = len(episode)
        if steps == 0:
            return
        observations = episode.get_observations(slice(0, steps + 1))
        data = {
            OBS: tree.map_structure(lambda o: o[:steps], observations),
            NEXT_OBS: tree.map_structure(lambda o: o[1 : steps + 1], observations),
            ACTIONS: episode.get_actions(slice(0, steps)),
            REWARDS: np.asarray(episode.get_rewards(slice(0, steps)), dtype=np.float32),
            TERMINATEDS: np.zeros(steps, dtype=bool),
            TRUNCATEDS: np.zeros(steps, dtype=bool),
        }
        data[TERMINATEDS][-1] = episode.is_terminated
        data[TRUNCATEDS][-1] = episode.is_truncated
        if steps > self.capacity:  # only the newest fit
            data = tree.map_structure(lambda column: column[-self.capacity :], data)
            steps = self.capacity
        rows = (self._next_row + np.arange(steps)) % self.capacity
        self._ensure_room(data, int(rows.max()) + 1)
        assert self._columns is not None
        for column, value in zip(tree.flatten(self._columns), tree.flatten(data), strict=True):
            column[rows] = value

        number, last_row, last_step = self._open.pop(episode.id_, (self._episodes_seen, -1, -1))
        if last_row < 0:
            self._episodes_seen += 1
        elif self._episode[last_row] == number and self._step[last_row] == last_step:
            self._successor[last_row] = rows[0]  # the previous chunk's last row is still stored
        first_step = last_step + 1
        self._episode[rows] = number
        self._step[rows] = first_step + np.arange(steps)
        self._successor[rows[:-1]] = rows[1:]
        self._successor[rows[-1]] = -1
        if not episode.is_done:
            self._open[episode.id_] = (number, int(rows[-1]), first_step + steps - 1)
        if self._priorities is not None:
            self._priorities.set(rows, np.full(steps, self._max_priority**self._alpha))

        self._next_row = int((rows[-1] + 1) % self.capacity)
        self.size = min(self.size + steps, self.capacity)
        self.added_lifetime += steps

    @property
    def _alpha(self) -> float:
        return float(self.alpha if self.alpha is not None else 1.0)

    def _ensure_room(self, data: dict[str, Any], rows: int) -> None:
        """Allocate (first add) or grow the arrays to hold ``rows`` rows, doubling up to ``capacity``."""
        if rows <= self._allocated:
            return
        size = min(self.capacity, max(rows, 2 * self._allocated, 1024))

        def grown(old: np.ndarray | None, sample: np.ndarray) -> np.ndarray:
            sample = np.asarray(sample)
            new = np.zeros((size, *sample.shape[1:]), dtype=sample.dtype)
            if old is not None:
                new[: len(old)] = old
            return new

        if self._columns is None:
            self._columns = tree.map_structure(lambda value: grown(None, value), data)
        else:
            self._columns = tree.map_structure(grown, self._columns, data)
        for name in ("_episode", "_step", "_successor"):
            old = getattr(self, name)
            new = np.full(size, -1, dtype=np.int64)
            new[: len(old)] = old
            setattr(self, name, new)
        self._allocated = size

    # ---- sampling ---------------------------------------------------------------------------------

    def sample(
        self, num_items: int, *, n_step: int | tuple[int, int] = 1, gamma: float = 0.99, beta: float = 0.4
    ) -> TrainBatch:
        """A train batch of ``num_items`` rows (columns named as RLlib's learner connectors name them)."""
        if self.size == 0 or self._columns is None:
            raise ValueError("cannot sample from an empty replay buffer")
        if self._priorities is not None:
            masses = self.rng.random(num_items) * self._priorities.total
            rows = np.minimum(self._priorities.find(masses), self.size - 1)
        else:
            rows = self.rng.integers(0, self.size, num_items)
        self._last_rows = rows
        self.sampled_lifetime += num_items
        if isinstance(n_step, tuple | list):
            wanted = self.rng.integers(n_step[0], n_step[1], num_items)
        else:
            wanted = np.full(num_items, int(n_step))
        rewards, last, steps = self._n_step(rows, wanted, gamma)
        columns = self._columns
        return TrainBatch(
            obs=tree.map_structure(lambda column: column[rows], columns[OBS]),
            actions=tree.map_structure(lambda column: column[rows], columns[ACTIONS]),
            rewards=rewards,
            new_obs=tree.map_structure(lambda column: column[last], columns[NEXT_OBS]),
            terminateds=columns[TERMINATEDS][last],
            truncateds=columns[TRUNCATEDS][last],
            n_step=steps,
            weights=self._weights(rows, beta),
        )

    def _n_step(self, rows: np.ndarray, wanted: np.ndarray, gamma: float) -> tuple[np.ndarray, ...]:
        """Discounted sums of up to ``wanted`` rewards from each row, the last row summed, and how many."""
        assert self._columns is not None
        rewards = self._columns[REWARDS][rows].astype(np.float32)
        ended = self._columns[TERMINATEDS] | self._columns[TRUNCATEDS]
        last = rows.copy()
        steps = np.ones(len(rows), dtype=np.int64)
        going = ~ended[last] & (wanted > 1)
        discount = np.float32(1.0)
        for k in range(1, int(wanted.max()) if len(wanted) else 1):
            discount = discount * np.float32(gamma)
            following = np.where(going, self._successor[last], 0)
            going &= (
                (following >= 0)
                & (self._episode[following] == self._episode[last])
                & (self._step[following] == self._step[last] + 1)
            )
            if not going.any():
                break
            last = np.where(going, following, last)
            rewards += np.where(going, discount * self._columns[REWARDS][last], np.float32(0.0))
            steps += going
            going &= ~ended[last] & (wanted > k + 1)
        return rewards, last, steps

    def _weights(self, rows: np.ndarray, beta: float) -> np.ndarray:
        if self._priorities is None:
            return np.ones(len(rows), dtype=np.float32)
        total = self._priorities.total
        stored = self._priorities.get(np.arange(self.size))
        smallest = stored[stored > 0].min() / total
        probabilities = self._priorities.get(rows) / total
        weights = (probabilities * self.size) ** -beta / (smallest * self.size) ** -beta
        return np.asarray(weights, dtype=np.float32)

    def update_priorities(self, td_errors: np.ndarray) -> None:
        """New priorities ``(|TD error| + eps) ** alpha`` for the rows of the last sample, in its order."""
        if self._priorities is None or len(td_errors) == 0:
            return
        if len(td_errors) != len(self._last_rows):
            raise ValueError(f"{len(td_errors)} TD errors for the {len(self._last_rows)} rows last sampled")
        priorities = np.abs(np.asarray(td_errors, dtype=np.float64)) + PRIORITY_EPSILON
        self._priorities.set(self._last_rows, priorities**self._alpha)
        self._max_priority = max(self._max_priority, float(priorities.max()))

    # ---- RLlib's replay buffer interface -----------------------------------------------------------

    def get_metrics(self) -> dict[str, Any]:
        return {
            "num_env_steps_stored": self.size,
            "num_env_steps_added_lifetime": self.added_lifetime,
            "num_env_steps_sampled_lifetime": self.sampled_lifetime,
        }

    def get_state(self) -> dict[str, Any]:
        """Everything stored (``store_buffer_in_checkpoints: true`` puts it in checkpoints)."""
        return {
            "columns": self._columns,
            "allocated": self._allocated,
            "size": self.size,
            "next_row": self._next_row,
            "episode": self._episode,
            "step": self._step,
            "successor": self._successor,
            "open": dict(self._open),
            "episodes_seen": self._episodes_seen,
            "priorities": None if self._priorities is None else self._priorities.tree,
            "max_priority": self._max_priority,
            "added_lifetime": self.added_lifetime,
            "sampled_lifetime": self.sampled_lifetime,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        self._columns = state["columns"]
        self._allocated = state["allocated"]
        self.size = state["size"]
        self._next_row = state["next_row"]
        self._episode = state["episode"]
        self._step = state["step"]
        self._successor = state["successor"]
        self._open = dict(state["open"])
        self._episodes_seen = state["episodes_seen"]
        if self._priorities is not None and state["priorities"] is not None:
            self._priorities.tree = state["priorities"]
        self._max_priority = state["max_priority"]
        self.added_lifetime = state["added_lifetime"]
        self.sampled_lifetime = state["sampled_lifetime"]


class ModuleTransitions:
    """One :class:`TransitionReplayBuffer` per module, filled from single- or multi-agent episodes.

    ``capacity`` holds per module (RLlib's multi-agent buffers count env steps, each of which
    holds one step of every agent).  ``multi_agent``: metrics count agent steps, per module.
    ``modules``: the modules whose transitions are kept (those trained); None keeps every
    module's.  Module ids are strings, as RLlib's are, so that the metrics and checkpoint state
    keep them as keys.
    """

    def __init__(
        self,
        capacity: int = 10_000,
        *,
        alpha: float | None = None,
        seed: int | None = None,
        multi_agent: bool = False,
        modules: Collection[str] | None = None,
        default_module: str = "default_policy",
    ):
        self.capacity = capacity
        self.alpha = alpha
        self.seed = seed
        self.multi_agent = multi_agent
        self.modules = None if modules is None else set(modules)
        self.default_module = default_module
        self.buffers: dict[str, TransitionReplayBuffer] = {}

    def __len__(self) -> int:
        return sum(len(b) for b in self.buffers.values())

    @property
    def prioritized(self) -> bool:
        return self.alpha is not None

    def buffer(self, module_id: str) -> TransitionReplayBuffer:
        if module_id not in self.buffers:
            # Each module draws from its own generator, seeded from the run's seed and its name.
            seed = None if self.seed is None else [self.seed, zlib.crc32(str(module_id).encode())]
            self.buffers[module_id] = TransitionReplayBuffer(self.capacity, alpha=self.alpha, seed=seed)
        return self.buffers[module_id]

    def add(self, episodes: Any) -> None:
        """Store these (numpy'd) episode chunks: ``SingleAgentEpisode``s go to the default module,
        each agent of a ``MultiAgentEpisode`` to the module it is mapped to."""
        for episode in episodes if isinstance(episodes, list | tuple) else [episodes]:
            agents = getattr(episode, "agent_episodes", None)
            if agents is None:
                self.buffer(self.default_module).add(episode)
                continue
            for agent_id, agent_episode in agents.items():
                module_id = episode.module_for(agent_id)
                if self.modules is None or module_id in self.modules:
                    self.buffer(module_id).add(agent_episode)

    def sample(self, num_items: int, **kwargs: Any) -> dict[str, TrainBatch]:
        """``num_items`` rows of every module that has any (keyword arguments: TransitionReplayBuffer's)."""
        return {mid: b.sample(num_items, **kwargs) for mid, b in self.buffers.items() if len(b)}

    def update_priorities(self, td_errors: dict[str, np.ndarray]) -> None:
        """Each module's TD errors for the rows of its last sample."""
        for module_id, errors in td_errors.items():
            if module_id in self.buffers:
                self.buffers[module_id].update_priorities(errors)

    def get_metrics(self) -> dict[str, Any]:
        """The single-agent buffer's names for one default module; agent steps per module otherwise."""
        per_module = {mid: b.get_metrics() for mid, b in self.buffers.items()}
        if not self.multi_agent:
            return per_module.get(self.default_module) or TransitionReplayBuffer().get_metrics()
        return {
            "num_agent_steps_stored": sum(m["num_env_steps_stored"] for m in per_module.values()),
            "num_agent_steps_added_lifetime": sum(
                m["num_env_steps_added_lifetime"] for m in per_module.values()
            ),
            "num_agent_steps_sampled_lifetime": sum(
                m["num_env_steps_sampled_lifetime"] for m in per_module.values()
            ),
            "num_module_steps_stored": {mid: m["num_env_steps_stored"] for mid, m in per_module.items()},
        }

    def get_state(self) -> dict[str, Any]:
        return {"modules": {mid: b.get_state() for mid, b in self.buffers.items()}}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`get_state`'s dict, or a lone buffer's (checkpoints from before modules)."""
        modules = state.get("modules", {self.default_module: state})
        for module_id, module_state in modules.items():
            self.buffer(module_id).set_state(module_state)
