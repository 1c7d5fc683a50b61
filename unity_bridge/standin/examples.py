"""Stand-ins for ML-Agents' example games: named and shaped as its documentation describes them.

Behavior names, agent counts, action branches and vector sizes are those of ML-Agents'
docs/Learning-Environment-Examples.md, so that its example trainer configs (which name the
behaviors) run unchanged.  The mechanics are small one-dimensional games on the stand-in's
bookkeeping (``standin.game``), each with a simple learnable reward; the documented vector size is
reached by padding the game's few features with zeros.  Each reads its environment parameters
(the names ML-Agents' scenes read) when an agent's episode starts, and they change its difficulty:

* ``3DBall`` / ``3DBallHard``: 12 agents each balance a ball on a platform (2 continuous actions
  tilt it; +0.1 a step, -1 when the ball falls).  Vector 8 (tilt, the ball's position and
  velocity) or 5 (no velocity).  ``gravity`` and ``mass`` scale how hard the ball rolls and how
  much it is jostled, ``scale`` (the ball's size) shrinks the platform's safe area.
* ``GridWorld``: one-row grid, 9 agents; a camera, and the goal signal (one-hot: green or red is
  the right goal) as a 2-float vector; 1 branch of 5 (stay, up, down, left, right), masked at the
  walls and up/down always.  Green is at the right end, red at the left: +1 at the right goal,
  -1 at the wrong one, -0.01 a step.  ``gridSize`` is the row's length.
* ``WallJump``: behaviors ``SmallWallJump`` and ``BigWallJump`` in one scene (one agent each),
  branches (3, 3, 3, 2): forward/back, rotation, side, jump; vector 74.  A wall of height
  ``small_wall_height`` / ``big_wall_height`` stands midway on a track that grows with the height;
  crossing a wall of height > 0 takes a jump.  +1 at the goal, -1 for stepping off the start,
  -0.0005 a step.  Height 0: a short track and no jump, the easiest.
* ``Hallway``: 1 branch of 4 (stay, forward, enter the left goal, enter the right goal), vector
  30; the cue (which goal pays) is in the episode's first observation only, so the task needs
  memory: without it the best is a guess at the end (a return of 0.45), with it 1.0.  Staying is
  always masked, forward until the hallway's end and the goals elsewhere, so every episode is the
  same walk of ``hallway_length`` (default 1) steps, then one choice.  +1 at the right goal, -0.1
  at the wrong one, -0.0003 a step.
* ``PushBlock``: 1 branch of 7 (stay, forward, back, and four moves that do nothing here), vector
  70; walking into the block pushes it towards the goal (+1 when it arrives, -0.0025 a step).
  ``block_scale`` moves the goal further, ``block_drag`` makes pushes fail (drag / (1 + drag)).
* ``Pyramids``: 1 branch of 4 (stay, forward, back, press), vector 148; pressing the switch makes
  the golden brick appear elsewhere; +2 on reaching it (sparse), -0.001 a step.
* ``SoccerTwos``: teams ``SoccerTwos?team=0`` / ``?team=1``, two agents each in a group, branches
  (3, 3, 3), vector 336.  Walking forward into the ball kicks it towards the opponents' goal; a
  goal gives the scorers' group 1 - (the round's steps / max_steps) and the others' -1.
  ``ball_scale`` (default 7.5) sets the reach of a kick, ``gravity`` (9.81) its length.
* ``StrikersVsGoalie``: ``Striker?team=0`` (two, vector 294) against ``Goalie?team=1`` (one,
  vector 738) on the same field; only the strikers score; -0.001 a step for a striker, +0.001
  for the goalie.
* ``Sorter``: ``num_tiles`` (default 2, at most 20) tiles numbered 1 to 20 lie on a track; the
  agent must touch them in ascending order.  Vector 4 (its position and orientation), and a
  BufferSensor of up to 20 entities of 23 floats, one per tile (the value one-hot in 20, the tile's
  position relative to the agent in 2, 1 once visited), padded with rows of zeros.  Branches
  (3, 3, 3): move (stay, forward, back), touch (no, the tile here, no), and one that does nothing.
  +1 for the right tile, -1 for a wrong one (the episode ends), -1 / max_steps a step; the episode
  ends when every tile is visited.

The cooperative games for MA-POCA (``DungeonEscape``, ``PushBlockCollab``) are in ``standin.teams``
and registered here too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np

from unity_bridge.standin.game import Agent, Behavior, Game
from unity_bridge.standin.teams import TEAMS

FORWARD, BACK = 1, 2  # the move branch of most examples: 0 = stay


def _padded(features: list[float], size: int) -> np.ndarray:
    """The game's features first, zeros up to the documented vector size."""
    out = np.zeros(size, np.float32)
    out[: len(features)] = features
    return out


def _choice(action: tuple[np.ndarray, np.ndarray], branch: int = 0) -> int:
    discrete = action[1]
    return int(discrete[branch]) if len(discrete) > branch else 0


def _begin(game: Game, agent: Agent) -> None:
    """A new episode: a new id, and no action until one is decided (Unity clears its stored ones)."""
    agent.episode_id = game.new_id()
    agent.steps, agent.done, agent.interrupted = 0, False, False
    agent.last_action = (np.zeros(0, np.float32), np.zeros(0, np.int64))


class _Episodic(Game):
    """Games whose agents each play their own episodes: reset restarts every agent."""

    def reset(self) -> None:
        self.frame = 0
        for agent in self.agents:
            agent.reward = agent.group_reward = 0.0
            self.restart(agent)

    def _tick(self, agent: Agent, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        if agent.slot in actions:
            agent.last_action = actions[agent.slot]
        agent.steps += 1

    def _end(self, agent: Agent, stat: str, success: bool) -> None:
        agent.done = True
        self.stats.append((stat, float(success), 0))

    def _time_out(self, agent: Agent, stat: str) -> None:
        if not agent.done and agent.steps >= self.max_steps:
            agent.interrupted = True
            self._end(agent, stat, False)


@dataclass
class BallAgent(Agent):
    ball: np.ndarray = field(default_factory=lambda: np.zeros(2))
    velocity: np.ndarray = field(default_factory=lambda: np.zeros(2))
    tilt: np.ndarray = field(default_factory=lambda: np.zeros(2))
    gravity: float = 1.0  # relative to 9.81
    jostle: float = 0.05


class Balance(_Episodic):
    PLATFORM = 3.0  # half the platform's side

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int, behavior: str):
        super().__init__(agents, seed, decision_period, max_steps)
        self.hard = behavior == "3DBallHard"
        self.behaviors = [Behavior(behavior, 5 if self.hard else 8, 2, ())]
        self.agents = [BallAgent(slot=i, behavior=behavior) for i in range(agents)]

    def restart(self, agent: Agent) -> None:
        assert isinstance(agent, BallAgent)
        _begin(self, agent)
        agent.gravity = self.parameter("gravity", 9.81) / 9.81
        agent.jostle = 0.05 * agent.gravity / max(0.1, self.parameter("mass", 1.0)) ** 0.5
        agent.size = max(0.5, self.PLATFORM - 0.25 * self.parameter("scale", 1.0))  # the safe half-side
        agent.ball = self.rng.uniform(-0.5, 0.5, 2) * agent.size
        agent.velocity, agent.tilt = np.zeros(2), np.zeros(2)

    def observe(self, agent: Agent) -> np.ndarray:
        assert isinstance(agent, BallAgent)
        (tx, tz), (x, z), (vx, vz) = agent.tilt, agent.ball / agent.size, agent.velocity
        features = [tz, tx, x, 0.5, z] + ([] if self.hard else [vx, 0.0, vz])
        return np.array(features, np.float32)

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            assert isinstance(agent, BallAgent)
            self._tick(agent, actions)
            cont = agent.last_action[0]
            agent.tilt = np.asarray(cont, np.float64) if len(cont) == 2 else np.zeros(2)
            push = 0.1 * agent.gravity * agent.tilt + self.rng.normal(0.0, agent.jostle, 2)
            agent.velocity = 0.9 * agent.velocity + push
            agent.ball = agent.ball + agent.velocity
            if np.abs(agent.ball).max() > agent.size:
                agent.reward -= 1.0
                self._end(agent, "3DBall/Fell", True)
            else:
                agent.reward += 0.1
                self._time_out(agent, "3DBall/Fell")
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        assert isinstance(agent, BallAgent)
        return [(0.5, 96), (float(np.clip(0.5 + agent.ball[0] / (2 * self.PLATFORM), 0, 1)), 255)]


class GridWorld(_Episodic):
    STAY, UP, DOWN, LEFT, RIGHT = range(5)

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        super().__init__(agents, seed, decision_period, max_steps)
        self.behaviors = [Behavior("GridWorld", 2, 0, (5,), vector=True, camera=True)]
        self.agents = [Agent(slot=i, behavior="GridWorld") for i in range(agents)]

    def restart(self, agent: Agent) -> None:
        _begin(self, agent)
        agent.size = max(2, int(self.parameter("gridSize", 5.0)))
        agent.pos = float(self.rng.integers(1, agent.size))
        agent.target = float(self.rng.integers(2))  # 0: green (the right end) pays, 1: red (the left end)

    def observe(self, agent: Agent) -> np.ndarray:
        return np.array([1.0 - agent.target, agent.target], np.float32)

    def mask(self, agent: Agent) -> np.ndarray | None:
        return np.array([False, True, True, agent.pos <= 0, agent.pos >= agent.size])

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            self._tick(agent, actions)
            move = {self.LEFT: -1.0, self.RIGHT: 1.0}.get(_choice(agent.last_action), 0.0)
            agent.pos = float(np.clip(agent.pos + move, 0, agent.size))
            agent.reward -= 0.01
            if agent.pos in (0.0, agent.size):
                right = (agent.pos == agent.size) == (agent.target == 0)
                agent.reward += 1.0 if right else -1.0
                self._end(agent, "GridWorld/RightGoal", right)
            self._time_out(agent, "GridWorld/RightGoal")
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        return [(1.0, 255), (0.0, 64), (agent.pos / agent.size, 160)]


@dataclass
class WallAgent(Agent):
    wall: float = 0.0  # its height
    wall_at: float = 0.0


class WallJump(_Episodic):
    SMALL, BIG = "SmallWallJump", "BigWallJump"
    JUMP = 1  # the jump branch (the fourth): 0 = no jump

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        super().__init__(agents, seed, decision_period, max_steps)
        self.behaviors = [Behavior(self.SMALL, 74, 0, (3, 3, 3, 2)), Behavior(self.BIG, 74, 0, (3, 3, 3, 2))]
        self.agents = [
            WallAgent(slot=2 * i + k, behavior=name)
            for i in range(agents)
            for k, name in enumerate((self.SMALL, self.BIG))
        ]

    def restart(self, agent: Agent) -> None:
        assert isinstance(agent, WallAgent)
        _begin(self, agent)
        small = agent.behavior == self.SMALL
        height = self.parameter("small_wall_height" if small else "big_wall_height", 4.0 if small else 8.0)
        agent.wall = max(0.0, height)
        agent.size = 4.0 + 2.0 * float(np.ceil(agent.wall))  # the goal's distance
        agent.wall_at, agent.pos = agent.size // 2, 0.0

    def observe(self, agent: Agent) -> np.ndarray:
        assert isinstance(agent, WallAgent)
        n = agent.size
        at_wall = float(agent.pos == agent.wall_at - 1 and agent.wall > 0)
        features = [
            agent.pos / n,
            (agent.wall_at - agent.pos) / n,
            agent.wall / 8.0,
            at_wall,
            1 - agent.pos / n,
        ]
        return _padded(features, 74)

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            assert isinstance(agent, WallAgent)
            self._tick(agent, actions)
            move = _choice(agent.last_action)
            jumped = _choice(agent.last_action, 3) == self.JUMP
            blocked = agent.pos == agent.wall_at - 1 and agent.wall > 0 and not jumped
            if move == FORWARD and not blocked:
                agent.pos += 1.0
            elif move == BACK:
                agent.pos -= 1.0
            agent.reward -= 0.0005
            if agent.pos >= agent.size or agent.pos < 0:
                arrived = agent.pos >= agent.size
                agent.reward += 1.0 if arrived else -1.0
                self._end(agent, f"{agent.behavior}/Arrived", arrived)
            self._time_out(agent, f"{agent.behavior}/Arrived")
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        assert isinstance(agent, WallAgent)
        return [(agent.wall_at / agent.size, 96), (1.0, 255), (agent.pos / agent.size, 160)]


@dataclass
class HallwayAgent(Agent):
    cue_at: int = -1  # the step of its episode's first observation, the one that shows the cue


class Hallway(_Episodic):
    STAY, FORWARD, LEFT_GOAL, RIGHT_GOAL = range(4)

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        super().__init__(agents, seed, decision_period, max_steps)
        self.behaviors = [Behavior("Hallway", 30, 0, (4,))]
        self.agents = [HallwayAgent(slot=i, behavior="Hallway") for i in range(agents)]

    def restart(self, agent: Agent) -> None:
        assert isinstance(agent, HallwayAgent)
        _begin(self, agent)
        agent.cue_at = -1
        agent.size = max(1, int(self.parameter("hallway_length", 1.0)))
        agent.pos = 0.0
        agent.target = float(self.rng.integers(2))  # 0: the left goal pays, 1: the right one

    def observe(self, agent: Agent) -> np.ndarray:
        # The episode's first observation, whatever its step: an agent restarted mid-run is stepped
        # once before its first decision.
        assert isinstance(agent, HallwayAgent)
        if agent.cue_at < 0:
            agent.cue_at = agent.steps
        first = agent.steps == agent.cue_at
        cue = [1.0 - agent.target, agent.target] if first else [0.0, 0.0]
        return _padded([agent.pos / agent.size, float(agent.pos >= agent.size), *cue, float(first)], 30)

    def mask(self, agent: Agent) -> np.ndarray | None:
        # Staying is masked: each episode is the same walk, and the cue is kept across a fixed span.
        at_end = agent.pos >= agent.size
        return np.array([True, at_end, not at_end, not at_end])

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            self._tick(agent, actions)
            choice = _choice(agent.last_action)
            agent.reward -= 0.0003
            if choice == self.FORWARD:
                agent.pos = min(agent.size, agent.pos + 1.0)
            elif choice in (self.LEFT_GOAL, self.RIGHT_GOAL):
                right = choice - self.LEFT_GOAL == agent.target
                agent.reward += 1.0 if right else -0.1
                self._end(agent, "Hallway/RightGoal", right)
            self._time_out(agent, "Hallway/RightGoal")
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        assert isinstance(agent, HallwayAgent)
        cue = [(agent.target, 255)] if agent.steps == agent.cue_at else []
        return [*cue, (agent.pos / agent.size, 128)]


@dataclass
class BlockAgent(Agent):
    block: float = 1.0
    drag: float = 0.0  # the chance that a push fails


class PushBlock(_Episodic):
    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        super().__init__(agents, seed, decision_period, max_steps)
        self.behaviors = [Behavior("PushBlock", 70, 0, (7,))]
        self.agents = [BlockAgent(slot=i, behavior="PushBlock") for i in range(agents)]

    def restart(self, agent: Agent) -> None:
        assert isinstance(agent, BlockAgent)
        _begin(self, agent)
        agent.size = 3.0 + round(2 * max(0.0, self.parameter("block_scale", 2.0)))  # the goal
        drag = max(0.0, self.parameter("block_drag", 0.5))
        agent.drag = drag / (1.0 + drag)
        agent.pos, agent.block = 0.0, 1.0

    def observe(self, agent: Agent) -> np.ndarray:
        assert isinstance(agent, BlockAgent)
        n = agent.size
        return _padded(
            [agent.pos / n, agent.block / n, (agent.block - agent.pos) / n, 1 - agent.block / n], 70
        )

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            assert isinstance(agent, BlockAgent)
            self._tick(agent, actions)
            move = _choice(agent.last_action)
            if move == FORWARD and (agent.pos + 1 < agent.block or self.rng.random() >= agent.drag):
                agent.pos += 1.0
                agent.block = max(agent.block, agent.pos + 1.0)
            elif move == BACK:
                agent.pos = max(0.0, agent.pos - 1.0)
            agent.reward -= 0.0025
            if agent.block >= agent.size:
                agent.reward += 1.0
                self._end(agent, "PushBlock/Scored", True)
            self._time_out(agent, "PushBlock/Scored")
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        assert isinstance(agent, BlockAgent)
        return [(1.0, 255), (agent.block / agent.size, 192), (agent.pos / agent.size, 96)]


@dataclass
class PyramidAgent(Agent):
    switch: float = 0.0
    brick: float = -1.0  # where the golden brick is; -1 until the switch is pressed


class Pyramids(_Episodic):
    STAY, FORWARD, BACK, PRESS = range(4)
    ROOM = 8.0

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        super().__init__(agents, seed, decision_period, max_steps)
        self.behaviors = [Behavior("Pyramids", 148, 0, (4,))]
        self.agents = [PyramidAgent(slot=i, behavior="Pyramids") for i in range(agents)]

    def restart(self, agent: Agent) -> None:
        assert isinstance(agent, PyramidAgent)
        _begin(self, agent)
        agent.size = self.ROOM
        agent.pos = float(self.rng.integers(0, int(self.ROOM) + 1))
        agent.switch, agent.brick = float(self.rng.integers(0, int(self.ROOM) + 1)), -1.0

    def observe(self, agent: Agent) -> np.ndarray:
        assert isinstance(agent, PyramidAgent)
        on = agent.brick >= 0
        brick = (agent.brick - agent.pos) / self.ROOM if on else 0.0
        return _padded([agent.pos / self.ROOM, (agent.switch - agent.pos) / self.ROOM, float(on), brick], 148)

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            assert isinstance(agent, PyramidAgent)
            self._tick(agent, actions)
            choice = _choice(agent.last_action)
            move = {self.FORWARD: 1.0, self.BACK: -1.0}.get(choice, 0.0)
            agent.pos = float(np.clip(agent.pos + move, 0, self.ROOM))
            if choice == self.PRESS and agent.pos == agent.switch and agent.brick < 0:
                far = [p for p in range(int(self.ROOM) + 1) if abs(p - agent.pos) >= 3]
                agent.brick = float(self.rng.choice(far))
            agent.reward -= 0.001
            if agent.brick >= 0 and agent.pos == agent.brick:
                agent.reward += 2.0
                self._end(agent, "Pyramids/GoldenBrick", True)
            self._time_out(agent, "Pyramids/GoldenBrick")
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        assert isinstance(agent, PyramidAgent)
        brick = [(agent.brick / self.ROOM, 255)] if agent.brick >= 0 else []
        return [(agent.switch / self.ROOM, 96), *brick, (agent.pos / self.ROOM, 160)]


class Soccer(Game):
    """Teams on one field, each agent in its team's group; team 0 attacks the goal at FIELD, team 1
    the goal at 0, and each team sees the field from its own side (the same policy plays both)."""

    FIELD = 10.0

    def __init__(
        self,
        seed: int,
        decision_period: int,
        max_steps: int,
        teams: list[tuple[str, int, int, float]],  # (behavior, agents, vector size, reward a step)
        scoring: tuple[int, ...] = (0, 1),  # the teams that can score
    ):
        super().__init__(sum(t[1] for t in teams), seed, decision_period, max_steps)
        self.behaviors = [Behavior(name, size, 0, (3, 3, 3)) for name, _, size, _ in teams]
        self.agents = []
        for team, (name, count, _, _) in enumerate(teams):
            self.agents += [
                Agent(slot=len(self.agents) + i, behavior=name, group_id=team + 1) for i in range(count)
            ]
        self.sizes = {name: size for name, _, size, _ in teams}
        self.existential = {name: per_step for name, _, _, per_step in teams}
        self.scoring = scoring
        self.ball = self.FIELD / 2
        self.reach, self.kick = 1.0, 2.0
        self.round_steps = 0

    def _side(self, agent: Agent, x: float) -> float:
        """A position as the agent's team sees it (attacking towards FIELD)."""
        return x if agent.group_id == 1 else self.FIELD - x

    def _kickoff(self) -> None:
        self.ball, self.round_steps = self.FIELD / 2, 0
        self.reach = max(0.5, self.parameter("ball_scale", 7.5) / 7.5)
        self.kick = 2.0 * 9.81 / max(1.0, self.parameter("gravity", 9.81))

    def restart(self, agent: Agent) -> None:
        _begin(self, agent)
        agent.pos = self._side(agent, float(self.rng.uniform(1.0, 3.0)))

    def reset(self) -> None:
        self.frame = 0
        self._kickoff()
        for agent in self.agents:
            agent.reward = agent.group_reward = 0.0
            self.restart(agent)

    def observe(self, agent: Agent) -> np.ndarray:
        me, ball = self._side(agent, agent.pos), self._side(agent, self.ball)
        rivals = [self._side(agent, a.pos) - me for a in self.agents if a.group_id != agent.group_id]
        nearest = min(rivals, key=abs, default=0.0)
        features = [me / self.FIELD, ball / self.FIELD, (ball - me) / self.FIELD, nearest / self.FIELD]
        return _padded(features, self.sizes[agent.behavior])

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for i in self.rng.permutation(len(self.agents)):
            agent = self.agents[i]
            if agent.slot in actions:
                agent.last_action = actions[agent.slot]
            forward = 1.0 if agent.group_id == 1 else -1.0  # in field coordinates
            move = {FORWARD: forward, BACK: -forward}.get(_choice(agent.last_action), 0.0)
            agent.pos = float(np.clip(agent.pos + move, 0, self.FIELD))
            if move == forward and abs(self.ball - agent.pos) <= self.reach:
                self.ball = float(np.clip(self.ball + forward * self.kick, 0, self.FIELD))
            agent.reward += self.existential[agent.behavior]
            agent.steps += 1
        self.round_steps += 1
        self.frame += 1
        scorer = 0 if self.ball >= self.FIELD else 1 if self.ball <= 0 else None
        if scorer is not None and scorer not in self.scoring:
            self.ball = float(np.clip(self.ball, 1.0, self.FIELD - 1.0))  # no goal there: it bounces back
            scorer = None
        if scorer is None and self.round_steps < self.max_steps:
            return
        for agent in self.agents:
            agent.done, agent.interrupted = True, scorer is None
            if scorer is not None:
                won = agent.group_id == scorer + 1
                agent.group_reward += 1.0 - self.round_steps / self.max_steps if won else -1.0
        self.stats.append(("Soccer/Team0Scored", float(scorer == 0), 0))
        self._kickoff()

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        players = [(a.pos / self.FIELD, 96 if a.group_id == agent.group_id else 192) for a in self.agents]
        return [*players, (self.ball / self.FIELD, 255)]


@dataclass
class SorterAgent(Agent):
    values: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # 1..20, in sensor order
    places: np.ndarray = field(default_factory=lambda: np.zeros(0))
    visited: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))


class Sorter(_Episodic):
    MAX_TILES, ENTITY = 20, 23  # ML-Agents' Sorter: BufferSensor MaxNumObservables, ObservableSize
    TOUCH = 1  # the second branch

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        super().__init__(agents, seed, decision_period, max_steps)
        self.behaviors = [Behavior("Sorter", 4, 0, (3, 3, 3), buffer=(self.MAX_TILES, self.ENTITY))]
        self.agents = [SorterAgent(slot=i, behavior="Sorter") for i in range(agents)]

    def restart(self, agent: Agent) -> None:
        assert isinstance(agent, SorterAgent)
        _begin(self, agent)
        tiles = int(np.clip(self.parameter("num_tiles", 2.0), 1, self.MAX_TILES))
        agent.size = float(2 * tiles + 2)
        agent.values = self.rng.choice(np.arange(1, self.MAX_TILES + 1), tiles, replace=False)
        agent.places = self.rng.choice(int(agent.size) + 1, tiles, replace=False).astype(float)
        agent.visited = np.zeros(tiles, bool)
        agent.pos = float(self.rng.integers(0, int(agent.size) + 1))

    def observe(self, agent: Agent) -> np.ndarray:
        return np.array([agent.pos / agent.size, 0.0, 1.0, 0.0], np.float32)

    def entities(self, agent: Agent) -> np.ndarray:
        assert isinstance(agent, SorterAgent)
        rows = np.zeros((len(agent.values), self.ENTITY), np.float32)
        rows[np.arange(len(agent.values)), agent.values - 1] = 1.0
        rows[:, self.MAX_TILES] = (agent.places - agent.pos) / agent.size
        rows[:, self.MAX_TILES + 2] = agent.visited
        return rows

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            assert isinstance(agent, SorterAgent)
            self._tick(agent, actions)
            move = {FORWARD: 1.0, BACK: -1.0}.get(_choice(agent.last_action), 0.0)
            agent.pos = float(np.clip(agent.pos + move, 0, agent.size))
            agent.reward -= 1.0 / self.max_steps
            here = np.flatnonzero((agent.places == agent.pos) & ~agent.visited)
            if _choice(agent.last_action, 1) == self.TOUCH and len(here):
                right = agent.values[here[0]] == agent.values[~agent.visited].min()
                agent.visited[here[0]] = True
                agent.reward += 1.0 if right else -1.0
                if not right or agent.visited.all():
                    self._end(agent, "Sorter/AllVisited", bool(right))
            self._time_out(agent, "Sorter/AllVisited")
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        assert isinstance(agent, SorterAgent)
        tiles = [(p / agent.size, 64 + 8 * int(v)) for p, v in zip(agent.places, agent.values, strict=True)]
        return [*tiles, (agent.pos / agent.size, 255)]


def _soccer_twos(agents: int, seed: int, decision_period: int, max_steps: int) -> Game:
    teams = [(f"SoccerTwos?team={t}", agents, 336, 0.0) for t in (0, 1)]
    return Soccer(seed, decision_period, max_steps, teams)


def _strikers_vs_goalie(agents: int, seed: int, decision_period: int, max_steps: int) -> Game:
    teams = [("Striker?team=0", 2, 294, -0.001), ("Goalie?team=1", 1, 738, 0.001)]
    return Soccer(seed, decision_period, max_steps, teams, scoring=(0,))


# --game NAME -> the game, built from (agents, seed, decision_period, max_steps).
EXAMPLES: dict[str, Callable[[int, int, int, int], Game]] = {
    "3dball": partial(Balance, behavior="3DBall"),
    "3dballhard": partial(Balance, behavior="3DBallHard"),
    "gridworld": GridWorld,
    "walljump": WallJump,
    "hallway": Hallway,
    "pushblock": PushBlock,
    "pyramids": Pyramids,
    "soccertwos": _soccer_twos,
    "strikersvsgoalie": _strikers_vs_goalie,
    "sorter": Sorter,
    **TEAMS,  # standin/teams.py: DungeonEscape, PushBlockCollab
}
