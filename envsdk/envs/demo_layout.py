"""Where the parts of an env's spaces go in an ML-Agents ``.demo`` file: one :class:`Layout` for the
file's writer (``rollout.py --out FILE.demo``: :mod:`envsdk.evaluation.demonstrations.recording`) and
its readers (GAIL's expert and behavioral cloning: :mod:`envsdk.networks.reward_signals`).

A ``.demo`` file holds one behavior's steps: its observations are arrays, one per Box part of the
observation space in the space's order (a Dict's keys as the space orders them, a Tuple's items); its
continuous actions are the Box parts of the action space, each flattened, side by side; its discrete
actions one branch per Discrete part and per entry of a MultiDiscrete part, choices counted from 0;
and its action mask (True = allowed) is a top-level ``action_mask`` Box with one entry per discrete
choice, which is no observation.  A space with any other part is refused in one line.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

import gymnasium as gym
import numpy as np

from envsdk.envs.keys import MASK_KEY
from envsdk.envs.spaces import branch_sizes, nest, pick
from envsdk.errors import UserError

SUBJECT = "a .demo file"

Path = tuple[str | int, ...]  # a part's keys inside a Dict/Tuple space (spaces.pick's path)
Shape = tuple[int, ...]


def _parts(space: gym.Space, at: Path = ()) -> list[tuple[Path, gym.Space]]:
    """The parts of ``space`` that are no Dict or Tuple, with their paths, in the space's order."""
    if isinstance(space, gym.spaces.Dict):
        return [part for key, sub in space.spaces.items() for part in _parts(sub, (*at, key))]
    if isinstance(space, gym.spaces.Tuple):
        return [part for index, sub in enumerate(space.spaces) for part in _parts(sub, (*at, index))]
    return [(at, space)]


def first_choices(space: gym.Space) -> np.ndarray:
    """The value of a discrete part's first choice, per branch (gymnasium's ``start``; a file's 0)."""
    return np.asarray(getattr(space, "start", 0), np.int64).ravel()


def _split(columns: np.ndarray, widths: list[int]) -> list[np.ndarray]:
    return [columns[:, a:b] for a, b in itertools.pairwise(np.cumsum([0, *widths]))]


@dataclass(frozen=True)
class Layout:
    """Where each part of a pair of spaces goes in a ``.demo`` file."""

    obs_space: gym.Space
    act_space: gym.Space
    observations: tuple[tuple[Path, Shape], ...]  # each Box part and its shape
    mask: Path | None  # the observation part holding the discrete actions' mask
    continuous: tuple[tuple[Path, Shape], ...]  # each Box part of the actions and its shape
    discrete: tuple[tuple[Path, gym.Space], ...]  # each Discrete and MultiDiscrete part

    @classmethod
    def of(cls, obs_space: gym.Space, act_space: gym.Space, hint: str, **more: Any) -> Self:
        """The layout of these spaces (``more``: a subclass's fields); a space a ``.demo`` file cannot
        hold is a :class:`UserError` with ``hint``."""
        continuous: list[tuple[Path, Shape]] = []
        discrete: list[tuple[Path, gym.Space]] = []
        for at, part in _parts(act_space):
            if isinstance(part, gym.spaces.Box):
                continuous.append((at, tuple(map(int, part.shape))))
            elif isinstance(part, gym.spaces.Discrete) or (
                isinstance(part, gym.spaces.MultiDiscrete) and part.nvec.ndim == 1
            ):
                discrete.append((at, part))
            else:
                holds = f"{SUBJECT} holds Box, Discrete and MultiDiscrete actions"
                raise UserError(f"the action space {act_space} has a part {part}; {holds}", hint, SUBJECT)
        width = sum(sum(branch_sizes(part)) for _, part in discrete)
        observations: list[tuple[Path, Shape]] = []
        mask: Path | None = None
        for at, part in _parts(obs_space):
            if at == (MASK_KEY,) and isinstance(part, gym.spaces.Box) and part.shape == (width,) and width:
                mask = at  # the discrete actions' mask, one entry per choice (1 = allowed)
            elif isinstance(part, gym.spaces.Box) and 1 <= len(part.shape) <= 3:
                observations.append((at, tuple(map(int, part.shape))))
            else:
                name = "observation" + "".join(f"[{key!r}]" for key in at)
                message = f"{name} is {part}; {SUBJECT} holds arrays of 1 to 3 dimensions (Box spaces)"
                raise UserError(message, hint, SUBJECT)
        return cls(
            obs_space, act_space, tuple(observations), mask, tuple(continuous), tuple(discrete), **more
        )

    @property
    def shapes(self) -> tuple[Shape, ...]:
        return tuple(shape for _, shape in self.observations)

    @property
    def widths(self) -> list[int]:
        """Each continuous part's columns in the file."""
        return [int(np.prod(shape)) for _, shape in self.continuous]

    @property
    def continuous_size(self) -> int:
        return sum(self.widths)

    @property
    def branches(self) -> tuple[int, ...]:
        return tuple(n for _, part in self.discrete for n in branch_sizes(part))

    # ---- the writer's side: a batch of values (rows first) as the file's columns ------------------

    def observation_columns(self, obs: Any) -> list[np.ndarray]:
        """The file's observations, as float32 arrays of ``(rows, *shape)``."""
        return [np.asarray(pick(obs, at), np.float32).reshape(-1, *shape) for at, shape in self.observations]

    def mask_column(self, obs: Any) -> np.ndarray | None:
        """The action mask, as booleans (None: the space has none)."""
        return None if self.mask is None else np.asarray(pick(obs, self.mask), bool)

    def action_columns(self, actions: Any, rows: int) -> tuple[np.ndarray, np.ndarray]:
        """The file's continuous ``(rows, continuous_size)`` and discrete ``(rows, branches)`` actions."""
        continuous = [
            np.asarray(pick(actions, at), np.float32).reshape(rows, -1) for at, _ in self.continuous
        ]
        discrete = [
            np.asarray(pick(actions, at), np.int64).reshape(rows, -1) - first_choices(part)
            for at, part in self.discrete
        ]
        return (
            np.concatenate([np.zeros((rows, 0), np.float32), *continuous], axis=1),
            np.concatenate([np.zeros((rows, 0), np.int64), *discrete], axis=1),
        )

    # ---- the readers' side: a file's columns as the spaces' values -------------------------------

    def observations_of(self, demo: Any, array: Callable[[np.ndarray], Any] = np.asarray) -> Any:
        """A :class:`unity_bridge.demo_files.Demonstration`'s observations as a batch of the space's
        values (``array`` makes each part's), with the action mask where the space has one (every
        choice allowed where the file holds none)."""
        parts = {
            at: np.asarray(seen).reshape(-1, *shape)
            for (at, shape), seen in zip(self.observations, demo.observations, strict=True)
        }
        if self.mask is not None:
            masks = demo.action_masks
            if masks is None:
                masks = np.ones((len(demo.rewards), sum(self.branches)), bool)
            parts[self.mask] = np.asarray(masks, pick(self.obs_space, self.mask).dtype)
        return nest(self.obs_space, {at: array(value) for at, value in parts.items()})

    def actions_of(self, demo: Any, array: Callable[[np.ndarray], Any] = np.asarray) -> Any:
        """A demonstration's actions as the action space's values (a choice outside its branch refused)."""
        parts = {
            at: taken.reshape(-1, *shape).astype(np.float32)
            for (at, shape), taken in zip(
                self.continuous, _split(demo.continuous_actions, self.widths), strict=True
            )
        }
        stored = np.asarray(demo.discrete_actions)
        for row, b in np.argwhere((stored < 0) | (stored >= np.asarray(self.branches, np.int64)))[:1]:
            found = f"its discrete branch {b} holds {stored[row, b]}, outside 0 to {self.branches[b] - 1}"
            raise UserError(found, "record it again with this version (choices from 0)", SUBJECT)
        branches = [len(branch_sizes(part)) for _, part in self.discrete]
        for (at, part), taken in zip(self.discrete, _split(stored, branches), strict=True):
            choice = taken + first_choices(part)
            parts[at] = choice.reshape(-1) if isinstance(part, gym.spaces.Discrete) else choice
        return nest(self.act_space, {at: array(value) for at, value in parts.items()})
