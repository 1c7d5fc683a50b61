"""``rollout.py --out FILE.demo``: the played episodes as an ML-Agents demonstration file.

A ``.demo`` file holds one behavior, its spaces' parts laid out as
:class:`~envsdk.envs.demo_layout.Layout` says (the layout GAIL and behavioral cloning read it back
with).  :func:`layout` decides from the env's spaces before any episode is played, and refuses in one
line what the format cannot hold or a file cannot tell apart (agents of several spaces, several
behaviors or policies); :func:`demonstration` turns the evaluator's records into
:class:`~unity_bridge.demo_files.Demonstration` rows.  The behavior's name is a Unity game's
behavior, else the env's name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from envsdk.envs.demo_layout import SUBJECT, Layout
from envsdk.errors import UserError
from envsdk.evaluation.evaluator import EpisodeRecord, Trace
from unity_bridge.demo_files import Demonstration, write_demo

NPZ = "record it as a .npz experience file instead"


@dataclass(frozen=True)
class Plan(Layout):
    """Where the env's observations and actions go in the file, and the behavior it is named for."""

    behavior_name: str


def layout(
    spaces: dict[str, tuple[gym.Space, gym.Space]], env_name: str, unity: bool, policies: Sequence[str] = ()
) -> Plan:
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
    return Plan.of(obs_space, act_space, NPZ, behavior_name=behaviors[0])


def demonstration(records: list[EpisodeRecord], plan: Plan) -> Demonstration:
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
        observation_shapes=plan.shapes,
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


def _rows(trace: Trace, plan: Plan, cut: bool) -> dict[str, Any]:
    steps = len(trace.rewards)
    seen = plan.observation_columns(trace.obs)
    continuous, discrete = plan.action_columns(trace.actions, steps)
    mask = plan.mask_column(trace.obs)
    dones = np.zeros(steps, bool)
    dones[-1] = True
    max_step = np.zeros(steps, bool)
    max_step[-1] = cut or not trace.terminated
    return {
        "obs": [s[:steps] for s in seen],
        "final": [s[min(steps, len(s) - 1)] for s in seen],
        "continuous": continuous,
        "discrete": discrete,
        "rewards": np.asarray(trace.rewards, np.float32),
        "dones": dones,
        "max_step": max_step,
        "mask": None if mask is None else mask[:steps],
    }


def write(path: Path, records: list[EpisodeRecord], plan: Plan) -> Demonstration:
    """Write the episodes as ``path`` (atomically); the demonstration written is returned."""
    demo = demonstration(records, plan)
    write_demo(path, demo)
    return demo
