"""``rollout.py --out FILE.demo``: the played episodes as an ML-Agents demonstration file.

A ``.demo`` file holds one behavior: observations that are arrays (a Box, or a Dict/Tuple of Boxes:
one observation per Box, in the space's order), continuous actions (Box parts) and discrete ones
(Discrete, MultiDiscrete parts: one branch each), and a discrete action mask (a Unity game's
``action_mask`` beside its observations).  :func:`layout` decides from the env's spaces before any
episode is played, and refuses what the format cannot hold in one line; :func:`demonstration` turns
the evaluator's records into :class:`~unity_bridge.demo_files.Demonstration` rows.  The behavior's
name is a Unity game's behavior, else the env's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from envsdk.envs.keys import MASK_KEY
from envsdk.errors import UserError
from envsdk.evaluation.evaluator import EpisodeRecord, Trace
from unity_bridge.demo_files import Demonstration, write_demo

SUBJECT = "a .demo file"
NPZ = "record it as a .npz experience file instead"

Path_ = tuple[str | int, ...]  # a part's keys inside a Dict/Tuple space


@dataclass(frozen=True)
class Layout:
    """Where each part of the env's observations and actions goes in a ``.demo`` file."""

    behavior_name: str
    observations: tuple[tuple[Path_, tuple[int, ...]], ...]  # each Box part and its shape
    mask: Path_ | None  # the observation part holding the discrete actions' mask
    continuous: tuple[tuple[Path_, int], ...]  # each Box action part and its size
    discrete: tuple[tuple[Path_, tuple[int, ...]], ...]  # each Discrete/MultiDiscrete part and its branches

    @property
    def continuous_size(self) -> int:
        return sum(size for _, size in self.continuous)

    @property
    def branches(self) -> tuple[int, ...]:
        return tuple(b for _, branches in self.discrete for b in branches)


def _parts(space: gym.Space, at: Path_ = ()) -> list[tuple[Path_, gym.Space]]:
    if isinstance(space, gym.spaces.Dict):
        return [part for key, sub in space.spaces.items() for part in _parts(sub, (*at, key))]
    if isinstance(space, gym.spaces.Tuple):
        return [part for index, sub in enumerate(space.spaces) for part in _parts(sub, (*at, index))]
    return [(at, space)]


def _name(at: Path_) -> str:
    return "observation" + "".join(f"[{key!r}]" for key in at)


def layout(
    spaces: dict[str, tuple[gym.Space, gym.Space]], env_name: str, unity: bool, policies: Sequence[str] = ()
) -> Layout:
    """The layout of the agents' spaces (they must share one: a file holds one behavior, one policy's
    play where ``policies`` names those a checkpoint trains); a space the format cannot hold is
    refused before anything is played."""
    if len(policies) > 1 and not unity:  # a game's behaviors, each its policy, are told apart below
        raise UserError(
            f"the checkpoint plays policies {list(policies)}; {SUBJECT} holds one's", NPZ, SUBJECT
        )
    distinct = {(repr(obs), repr(act)) for obs, act in spaces.values()}
    if len(distinct) > 1:
        raise UserError(
            f"the agents have {len(distinct)} different spaces; {SUBJECT} holds one behavior's",
            NPZ,
            SUBJECT,
        )
    if unity:
        from envsdk.envs.unity.rllib_env import behavior_of

        behaviors = sorted({behavior_of(agent) for agent in spaces})
    else:
        behaviors = [env_name]
    if len(behaviors) > 1:
        raise UserError(f"the game has behaviors {behaviors}; {SUBJECT} holds one", NPZ, SUBJECT)
    obs_space, act_space = next(iter(spaces.values()))
    continuous: list[tuple[Path_, int]] = []
    discrete: list[tuple[Path_, tuple[int, ...]]] = []
    for at, part in _parts(act_space):
        if isinstance(part, gym.spaces.Box):
            continuous.append((at, int(np.prod(part.shape))))
        elif isinstance(part, gym.spaces.Discrete):
            discrete.append((at, (int(part.n),)))
        elif isinstance(part, gym.spaces.MultiDiscrete) and part.nvec.ndim == 1:
            discrete.append((at, tuple(int(n) for n in part.nvec)))
        else:
            raise UserError(
                f"the action space {act_space} has a part {part}; {SUBJECT} holds Box, Discrete and"
                " MultiDiscrete actions",
                NPZ,
                SUBJECT,
            )
    width = sum(b for _, branches in discrete for b in branches)
    observations: list[tuple[Path_, tuple[int, ...]]] = []
    mask: Path_ | None = None
    for at, part in _parts(obs_space):
        if at == (MASK_KEY,) and isinstance(part, gym.spaces.Box) and part.shape == (width,) and width:
            mask = at  # the discrete actions' mask, one entry per choice (1 = allowed)
        elif isinstance(part, gym.spaces.Box) and 1 <= len(part.shape) <= 3:
            observations.append((at, tuple(int(n) for n in part.shape)))
        else:
            raise UserError(
                f"{_name(at)} is {part}; {SUBJECT} holds arrays of 1 to 3 dimensions (Box spaces)",
                NPZ,
                SUBJECT,
            )
    return Layout(behaviors[0], tuple(observations), mask, tuple(continuous), tuple(discrete))


def _part(value: Any, at: Path_) -> Any:
    for key in at:
        value = value[key]
    return value


def demonstration(records: list[EpisodeRecord], plan: Layout) -> Demonstration:
    """Every agent's steps of every episode, episode by episode; an episode cut short (by ``--steps``,
    or an agent's part that ended without the env ending it) ends at the step limit in the file."""
    traces = [trace for record in records for trace in record.agents.values() if len(trace.rewards)]
    if not traces:
        raise UserError("no step was played", "play more episodes", SUBJECT)
    cut = [
        not record.complete for record in records for trace in record.agents.values() if len(trace.rewards)
    ]
    rows = [_rows(trace, plan, was_cut) for trace, was_cut in zip(traces, cut, strict=True)]
    width = sum(plan.branches)
    return Demonstration(
        behavior_name=plan.behavior_name,
        observation_shapes=tuple(shape for _, shape in plan.observations),
        continuous_size=plan.continuous_size,
        discrete_branches=plan.branches,
        observations=tuple(
            np.concatenate([r["obs"][k] for r in rows]) for k in range(len(plan.observations))
        ),
        continuous_actions=np.concatenate([r["continuous"] for r in rows]),
        discrete_actions=np.concatenate([r["discrete"] for r in rows]),
        rewards=np.concatenate([r["rewards"] for r in rows]),
        dones=np.concatenate([r["dones"] for r in rows]),
        max_step_reached=np.concatenate([r["max_step"] for r in rows]),
        action_masks=np.concatenate([r["mask"] for r in rows]).reshape(-1, width) if plan.mask else None,
        final_observations=tuple(
            np.stack([r["final"][k] for r in rows]) for k in range(len(plan.observations))
        ),
    )


def _rows(trace: Trace, plan: Layout, cut: bool) -> dict[str, Any]:
    steps = len(trace.rewards)
    seen = [np.asarray(_part(trace.obs, at), np.float32) for at, _ in plan.observations]
    actions = trace.actions
    continuous = [
        np.asarray(_part(actions, at), np.float32).reshape(steps, size) for at, size in plan.continuous
    ]
    discrete = [
        np.asarray(_part(actions, at), np.int64).reshape(steps, len(branches))
        for at, branches in plan.discrete
    ]
    dones = np.zeros(steps, bool)
    dones[-1] = True
    max_step = np.zeros(steps, bool)
    max_step[-1] = cut or not trace.terminated
    return {
        "obs": [
            s[:steps].reshape(steps, *shape) for s, (_, shape) in zip(seen, plan.observations, strict=True)
        ],
        "final": [
            s[min(steps, len(s) - 1)].reshape(shape)
            for s, (_, shape) in zip(seen, plan.observations, strict=True)
        ],
        "continuous": np.concatenate([np.zeros((steps, 0), np.float32), *continuous], axis=1),
        "discrete": np.concatenate([np.zeros((steps, 0), np.int64), *discrete], axis=1),
        "rewards": np.asarray(trace.rewards, np.float32),
        "dones": dones,
        "max_step": max_step,
        "mask": np.asarray(_part(trace.obs, plan.mask), bool)[:steps] if plan.mask else None,
    }


def write(path: Path, records: list[EpisodeRecord], plan: Layout) -> Demonstration:
    """Write the episodes as ``path`` (atomically); the demonstration written is returned."""
    demo = demonstration(records, plan)
    write_demo(path, demo)
    return demo
