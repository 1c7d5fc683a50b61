"""The stand-in's cooperative team games for MA-POCA (standin/teams.py): DungeonEscape's sacrifice
and door, PushBlockCollab's weights, driven directly with scripted actions, and through the real
bridge."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from unity_bridge.environment import Action, UnityEnvironment
from unity_bridge.settings import LaunchSettings
from unity_bridge.standin.build import write_build
from unity_bridge.standin.examples import EXAMPLES
from unity_bridge.standin.game import Report
from unity_bridge.standin.teams import BACK, FORWARD, DungeonEscape, PushBlockCollab

STAY = 0


def act(choice: int) -> tuple[np.ndarray, np.ndarray]:
    return np.zeros(0, np.float32), np.array([choice], np.int64)


def frame(game, choices: dict[int, int]) -> list[Report]:
    """One frame as the player plays it (decision period 1): the step with these choices (slot ->
    action; the others in play stay), then the output's reports (the agents as they were reported),
    then the bookkeeping after it."""
    game.step({a.slot: act(choices.get(a.slot, STAY)) for a in game.agents if not a.out})
    reports = [Report(copy.copy(r.agent), r.vector, r.mask) for r in game.reports()]
    game.after_report()
    return reports


def started(game):
    game.reset()
    game.reports()
    game.after_report()
    return game


def dungeon(max_steps: int = 50, seed: int = 0) -> DungeonEscape:
    game = started(DungeonEscape(1, seed, 1, max_steps))
    for agent, pos in zip(game.agents, (4.0, 5.0, 6.0), strict=True):  # the dragon at 0, the door at 8
        agent.pos = pos
    return game


def by_slot(reports: list[Report]) -> dict[int, Report]:
    return {r.agent.slot: r for r in reports}


def test_registered_as_examples_with_groups_of_three():
    for name, behavior, size in (
        ("dungeonescape", "DungeonEscape", 12),
        ("pushblockcollab", "PushBlockCollab", 16),
    ):
        game = EXAMPLES[name](2, 0, 1, 30)
        assert [(b.name, b.vector_size, b.continuous, b.branches) for b in game.behaviors] == [
            (behavior, size, 0, (7,))
        ]
        assert [a.group_id for a in game.agents] == [1, 1, 1, 2, 2, 2]
        game.reset()
        assert all(r.vector.shape == (size,) and r.mask is None for r in game.reports())


def test_the_sacrifice_removes_exactly_that_agent_until_the_round_ends():
    game = dungeon(max_steps=10)
    hero = game.agents[0]
    ids = [x.episode_id for x in game.agents]
    for _ in range(3):
        frame(game, {0: BACK})
    reports = by_slot(frame(game, {0: BACK}))  # 4 -> 0: the dragon
    assert hero.out and reports[0].agent.done and not hero.interrupted and hero.reward == 0.0
    assert reports[0].agent.group_reward == 0.0
    assert not game.areas[0].dragon and set(reports) == {0, 1, 2}
    assert reports[1].vector[1] == 0.0 and list(reports[1].vector[2:4]) == [0.0, 0.0]  # no dragon, no hero
    for _ in range(5):  # silent while the others play on, to the round's end
        reports = by_slot(frame(game, {1: STAY, 2: STAY}))
        assert set(reports) == {1, 2} and not any(r.agent.done for r in reports.values())
    reports = by_slot(frame(game, {1: STAY, 2: STAY}))  # step 10: time out
    assert set(reports) == {1, 2}
    assert all(r.agent.done and r.agent.interrupted and r.agent.group_reward == 0.0 for r in reports.values())
    reports = by_slot(game.reports())  # the next round: everyone back, new episodes
    assert set(reports) == {0, 1, 2} and not any(r.agent.done for r in reports.values())
    assert not hero.out and game.areas[0].dragon
    assert all(x.episode_id not in ids for x in game.agents)


def test_the_door_needs_the_dragon_slain_and_two_agents_together():
    game = dungeon()
    for _ in range(3):  # the agents at 5 and 6 reach the door (8) while the dragon lives
        frame(game, {1: FORWARD, 2: FORWARD})
    assert [x.pos for x in game.agents[1:]] == [8.0, 8.0]
    assert not any(x.done for x in game.agents)  # locked
    game = dungeon()
    for _ in range(4):
        frame(game, {0: BACK, 2: FORWARD})  # the hero slays the dragon; one agent at the door
    for _ in range(3):
        reports = frame(game, {2: STAY})
        assert not any(r.agent.done for r in reports)  # one agent alone does not open it
    for _ in range(2):
        reports = frame(game, {1: FORWARD, 2: STAY})  # 6, 7
        assert not any(r.agent.done for r in reports)
    ended = game.stats[:]
    reports = by_slot(frame(game, {1: FORWARD, 2: STAY}))  # both at 8: open
    assert set(reports) == {1, 2}
    assert all(r.agent.done and not r.agent.interrupted for r in reports.values())
    assert [r.agent.group_reward for r in reports.values()] == [1.0, 1.0]
    assert [r.agent.reward for r in reports.values()] == [0.0, 0.0]
    assert ("DungeonEscape/Escaped", 1.0, 0) in game.stats[len(ended) :]


def test_a_time_out_interrupts_everyone_with_no_group_reward():
    game = dungeon(max_steps=5)
    for _ in range(4):
        assert not any(r.agent.done for r in frame(game, {}))
    reports = frame(game, {})
    assert len(reports) == 3
    assert all(r.agent.done and r.agent.interrupted and r.agent.group_reward == 0.0 for r in reports)
    assert ("DungeonEscape/Escaped", 0.0, 0) in game.stats


def yard(max_steps: int = 40) -> PushBlockCollab:
    game = started(PushBlockCollab(1, 0, 1, max_steps))
    area = game.areas[0]
    area.blocks = np.array([5.0, 3.0, 2.0])  # weight 1 at 5, weight 2 at 3, weight 3 at 2; the goal at 8
    for agent in game.agents:
        agent.pos = 3.0
    return game


def test_a_block_moves_only_with_as_many_pushers_as_its_weight():
    game = yard()
    area = game.areas[0]
    frame(game, {0: FORWARD})  # one pusher: the weight-2 block stays, the pusher slips past
    assert area.blocks[1] == 3.0 and game.agents[0].pos == 4.0
    reports = frame(game, {1: FORWARD, 2: FORWARD})  # two: it moves, with them
    assert area.blocks[1] == 4.0 and [a.pos for a in game.agents] == [4.0, 4.0, 4.0]
    assert all(r.agent.group_reward == pytest.approx(-1.0 / game.max_steps) for r in reports)
    for agent in game.agents:
        agent.pos = 2.0
    frame(game, {0: FORWARD, 1: FORWARD})  # two push the weight-3 block: no
    assert area.blocks[2] == 2.0
    for agent in game.agents:
        agent.pos = 2.0
    frame(game, {0: FORWARD, 1: FORWARD, 2: FORWARD})
    assert area.blocks[2] == 3.0


def test_delivering_every_block_ends_the_round_with_the_weights_as_group_reward():
    game = yard()
    area = game.areas[0]
    for agent in game.agents:
        agent.pos = 2.0
    rewards = 0.0
    for step in range(6):  # together: 2 -> 8, pushing every block met on the way
        reports = frame(game, {0: FORWARD, 1: FORWARD, 2: FORWARD})
        rewards += reports[0].agent.group_reward
        assert all(r.agent.done for r in reports) == (step == 5)
    assert not area.delivered.any() and list(area.blocks) != [8.0, 8.0, 8.0]  # the next round's
    assert all(not r.agent.interrupted for r in reports)
    assert rewards == pytest.approx(1 + 2 + 3 - 6 / game.max_steps)
    assert ("PushBlockCollab/Delivered", 3.0, 0) in game.stats
    assert ("PushBlockCollab/AllDelivered", 1.0, 0) in game.stats


def test_pushblockcollab_times_out_interrupted():
    game = yard(max_steps=3)
    for _ in range(2):
        frame(game, {})
    reports = frame(game, {})
    assert all(r.agent.done and r.agent.interrupted for r in reports)
    assert ("PushBlockCollab/AllDelivered", 0.0, 0) in game.stats


@pytest.mark.parametrize("name", ["dungeonescape", "pushblockcollab"])
def test_deterministic_given_the_seed(name):
    def play(seed: int) -> list:
        game = EXAMPLES[name](2, seed, 1, 20)
        game.reset()
        rng = np.random.default_rng(7)
        seen = []
        for _ in range(60):
            reports = game.reports()
            seen += [(r.agent.slot, r.agent.episode_id, r.agent.done, r.vector.tobytes()) for r in reports]
            game.after_report()
            game.step({r.agent.slot: act(int(rng.integers(7))) for r in reports if not r.agent.done})
        return [*seen, game.stats]

    assert play(3) == play(3)
    assert play(3) != play(4)


def launch(tmp_path, name: str, args: list[str]) -> UnityEnvironment:
    build = write_build(tmp_path / "builds", name, ["--game", name.lower(), *args])
    config = {"file_name": str(build), "no_graphics": True, "timeout_wait": 20, "log_folder": str(tmp_path)}
    return UnityEnvironment(LaunchSettings.from_config(config))


def test_through_the_player_a_sacrificed_agent_stops_reporting(tmp_path):
    game = launch(tmp_path, "DungeonEscape", ["--max-steps", "12"])
    try:
        steps = game.wait_for_agents(game.reset())
        spec = game.specs["DungeonEscape"]
        assert list(game.specs) == ["DungeonEscape"] and spec.branches == (7,) and spec.continuous == 0
        assert [o.shape for o in spec.observations] == [(12,)]
        assert len(steps) == 3 and {s.group_id for s in steps} == {1}
        hero, *others = [s.agent_id for s in steps]
        for _ in range(12):
            game.set_actions("DungeonEscape", {hero: Action(discrete=[BACK])})
            steps = game.step()
            if any(s.agent_id == hero for s in steps if s.done):
                break
        (end,) = [s for s in steps if s.agent_id == hero]
        assert end.done and not end.interrupted and end.reward == 0.0 and end.group_reward == 0.0
        while True:
            steps = game.step()
            assert hero not in {s.agent_id for s in steps}
            if any(s.done for s in steps):
                break
        assert sorted(s.agent_id for s in steps) == sorted(others)
        assert all(s.done and s.interrupted for s in steps)
        steps = game.wait_for_agents(game.step())
        assert len(steps) == 3 and not {s.agent_id for s in steps} & {hero, *others}
    finally:
        game.close()


def test_through_the_player_pushblockcollab_plays_in_groups(tmp_path):
    game = launch(tmp_path, "PushBlockCollab", ["--agents", "2", "--max-steps", "5"])
    try:
        steps = game.wait_for_agents(game.reset())
        spec = game.specs["PushBlockCollab"]
        assert spec.branches == (7,) and [o.shape for o in spec.observations] == [(16,)]
        assert sorted(s.group_id for s in steps) == [1, 1, 1, 2, 2, 2]
        for _ in range(5):
            steps = game.step()
        assert len(steps) == 6 and all(s.done and s.interrupted for s in steps)
        assert all(s.group_reward == pytest.approx(-1 / 5) for s in steps)
    finally:
        game.close()
