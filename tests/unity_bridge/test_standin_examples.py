"""The stand-in's ML-Agents example games: the behaviors ML-Agents' docs and trainer configs name,
with their documented shapes, through the real bridge; their parameters change the game."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tests.helpers import PLAYERS
from unity_bridge.environment import Action, AgentStep, BehaviorSpec, UnityEnvironment
from unity_bridge.settings import LaunchSettings
from unity_bridge.standin.build import BUILDS

# build -> behavior -> (agents, observation shapes, continuous actions, branches), as
# ML-Agents' docs/Learning-Environment-Examples.md documents them (cameras: the build's --visual).
EXPECTED: dict[str, dict[str, tuple[int, list[tuple[int, ...]], int, tuple[int, ...]]]] = {
    "3DBall": {"3DBall": (12, [(8,)], 2, ())},
    "3DBallHard": {"3DBallHard": (12, [(5,)], 2, ())},
    "GridWorld": {"GridWorld": (9, [(2,), (32, 32, 3)], 0, (5,))},
    "WallJump": {
        "SmallWallJump": (1, [(74,)], 0, (3, 3, 3, 2)),
        "BigWallJump": (1, [(74,)], 0, (3, 3, 3, 2)),
    },
    "Hallway": {"Hallway": (1, [(30,), (16, 16, 1)], 0, (4,))},
    "PushBlock": {"PushBlock": (1, [(70,)], 0, (7,))},
    "Pyramids": {"Pyramids": (1, [(148,)], 0, (4,))},
    "SoccerTwos": {
        "SoccerTwos?team=0": (2, [(336,)], 0, (3, 3, 3)),
        "SoccerTwos?team=1": (2, [(336,)], 0, (3, 3, 3)),
    },
    "StrikersVsGoalie": {
        "Striker?team=0": (2, [(294,)], 0, (3, 3, 3)),
        "Goalie?team=1": (1, [(738,)], 0, (3, 3, 3)),
    },
}


def launch(name: str, tmp_path, **kw) -> UnityEnvironment:
    config = {"file_name": str(PLAYERS / "builds" / name), "no_graphics": True, "timeout_wait": 20}
    return UnityEnvironment(LaunchSettings.from_config({**config, "log_folder": str(tmp_path), **kw}))


def random_actions(game: UnityEnvironment, steps: list[AgentStep], rng: np.random.Generator) -> None:
    """Allowed random actions for every agent that asked."""
    for s in steps:
        if s.done:
            continue
        spec: BehaviorSpec = game.specs[s.behavior]
        discrete, at = [], 0
        for size in spec.branches:
            allowed = np.flatnonzero(s.mask[at : at + size]) if s.mask is not None else np.arange(size)
            discrete.append(int(rng.choice(allowed)))
            at += size
        game.set_actions(s.behavior, {s.agent_id: Action(rng.uniform(-1, 1, spec.continuous), discrete)})


def test_every_example_has_a_build():
    assert set(EXPECTED) <= set(BUILDS)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_an_example_reports_its_documented_behaviors_and_plays(name, tmp_path):
    game = launch(name, tmp_path)
    rng = np.random.default_rng(0)
    ended: dict[str, int] = {}
    try:
        steps = game.wait_for_agents(game.reset())
        first = {b: sum(s.behavior == b for s in steps) for b in game.specs}
        for _ in range(70):  # past every example's max_steps: each episode ends at least once
            random_actions(game, steps, rng)
            steps = game.wait_for_agents(game.step())
            for s in steps:
                ended[s.behavior] = ended.get(s.behavior, 0) + s.done
                assert all(np.isfinite(o).all() for o in s.obs)
    finally:
        game.close()
    found = {b: (first[b], [o.shape for o in spec.observations], spec.continuous, spec.branches)
             for b, spec in game.specs.items()}  # fmt: skip
    assert found == EXPECTED[name]
    assert all(ended.get(b, 0) > 0 for b in EXPECTED[name]), ended


def drawn(log: str, key: str) -> list[float]:
    return [float(v) for v in re.findall(rf"environment parameter {key} drawn (\S+)", log)]


def mean_return(name: str, tmp_path, parameters: dict, steps: int = 60) -> float:
    """The mean episode return of random play, with ``parameters`` sent as environment parameters."""
    game = launch(name, tmp_path, env_parameters=parameters, seed=1)
    rng = np.random.default_rng(1)
    returns: list[float] = []
    running: dict[tuple[str, int], float] = {}
    try:
        batch = game.wait_for_agents(game.reset())
        for _ in range(steps):
            random_actions(game, batch, rng)
            batch = game.wait_for_agents(game.step())
            for s in batch:
                key = (s.behavior, s.agent_id)
                running[key] = running.get(key, 0.0) + s.reward + s.group_reward
                if s.done:
                    returns.append(running.pop(key))
    finally:
        game.close()
    return float(np.mean(returns))


def uniform(low: float, high: float) -> dict:
    return {"sampler_type": "uniform", "sampler_parameters": {"min_value": low, "max_value": high}}


def test_3dball_draws_mass_gravity_and_scale_per_episode_and_they_make_it_harder(tmp_path):
    """3DBall_randomize.yaml's samplers reach the game as samplers, drawn at every agent's episode."""
    randomized = {"mass": uniform(0.5, 10), "gravity": uniform(7, 12), "scale": uniform(0.75, 3)}
    mean_return("3DBall", tmp_path / "random", randomized, steps=45)
    log = (tmp_path / "random" / "Player-0.log").read_text()
    for key, (low, high) in {"mass": (0.5, 10), "gravity": (7, 12), "scale": (0.75, 3)}.items():
        values = drawn(log, key)
        assert len(values) >= 24 and low <= min(values) and max(values) <= high  # 12 at reset, 12 after
        assert max(values) - min(values) > (high - low) / 3
    easy = mean_return("3DBall", tmp_path / "easy", {"gravity": 4.0, "scale": 0.2})
    hard = mean_return("3DBall", tmp_path / "hard", {"gravity": 60.0, "scale": 5.0})
    assert easy > hard


def episode_length(name: str, tmp_path, parameters: dict, prefer: list[list[int]]) -> float:
    """The mean length of the episodes a scripted player plays: in each branch the first allowed
    action of ``prefer``."""
    game = launch(name, tmp_path, env_parameters=parameters)
    lengths: list[int] = []
    running: dict[tuple[str, int], int] = {}
    try:
        batch = game.wait_for_agents(game.reset())
        for _ in range(45):
            for s in batch:
                if s.done:
                    continue
                choice, at = [], 0
                for size, order in zip(game.specs[s.behavior].branches, prefer, strict=True):
                    allowed = [a for a in order if s.mask is None or s.mask[at + a]]
                    choice.append(allowed[0])
                    at += size
                game.set_actions(s.behavior, {s.agent_id: Action(discrete=choice)})
            batch = game.wait_for_agents(game.step())
            for s in batch:
                key = (s.behavior, s.agent_id)
                running[key] = running.get(key, 0) + 1
                if s.done:
                    lengths.append(running.pop(key))
    finally:
        game.close()
    return float(np.mean(lengths))


@pytest.mark.parametrize(
    ("name", "easy", "hard", "prefer"),
    [
        (
            "WallJump",
            {"small_wall_height": 0, "big_wall_height": 0},
            {"small_wall_height": 4, "big_wall_height": uniform(6, 8)},
            [[1], [0], [0], [1]],  # forward, jumping
        ),
        ("PushBlock", {"block_scale": 0.5, "block_drag": 0}, {"block_scale": 4, "block_drag": 5}, [[1]]),
        ("GridWorld", {"gridSize": 2}, {"gridSize": 9}, [[4, 0]]),  # right until the wall
        ("Hallway", {"hallway_length": 1}, {"hallway_length": 8}, [[1, 2]]),  # forward, then the left goal
    ],
)
def test_parameters_change_the_difficulty(name, easy, hard, prefer, tmp_path):
    """The same scripted play takes longer to finish where the parameters make the task harder."""
    short = episode_length(name, tmp_path / "easy", easy, prefer)
    long = episode_length(name, tmp_path / "hard", hard, prefer)
    assert short * 1.5 < long
