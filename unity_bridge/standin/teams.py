"""Stand-ins for ML-Agents' cooperative example games (``trainer_type: poca``): teams in groups.

Behavior names, group sizes and action branches are those of ML-Agents'
docs/Learning-Environment-Examples.md; the scenes' ray sensors are replaced by a small vector of
the game's features, padded with zeros to the size given below.  ``--agents N`` is the number of
areas (scenes), each with a team of three agents in one group (group id = area + 1), so the
default (one area) plays three agents.  Both games have one branch of 7 (0 stay, 1 forward, 2 back,
and four moves that do nothing here, as PushBlock's stand-in has), no masks, and play on a track
of integer cells; a round ends for the whole team at once and the next begins for all of it.

* ``DungeonEscape``: a dragon at cell 0, a locked door at cell ``dungeon_length`` (default 8);
  the agents start in the middle third (cells 3 to 5 at length 8).  An agent that walks onto the
  living dragon slays it and is removed from its group (a sacrifice): its episode ends at that step
  (done, not interrupted, reward 0) and it sends nothing more until the round ends; the door
  unlocks.  Two remaining agents standing on the door's cell at the same step (after the dragon
  died) open it: every remaining agent's episode ends with group reward +1 (as ML-Agents' scene
  gives; no time penalty).  The sacrificed agent is not told: only a centralised critic can credit
  it.  After ``max_steps`` the round ends for the remaining agents, interrupted, group reward 0.
  Vector 12: the agent's position / length, the dragon alive (1: the door is locked), for each
  teammate (in slot order) present (0 once sacrificed) and its position / length (0 when gone),
  the round's steps / max_steps, zeros.  Stats ``DungeonEscape/Escaped`` and
  ``DungeonEscape/DragonSlain`` at each round's end.  Uniformly random play (decision period 1)
  escapes in about 4% of rounds with ``--max-steps 50`` (1% with 30, 9% with 80); the best play
  takes 5 steps.
* ``PushBlockCollab``: blocks of weight 1, 2 and 3 on a track of 8 cells, the goal at cell 8; the
  agents start at cells 0 to 1, the blocks at distinct cells 2 to 5.  Agents walk freely (past
  blocks too); a block moves a cell towards the goal when at least ``weight`` agents stand on its
  cell and step forward at the same step (they move with it), so a lone pusher slips past a heavy
  block.  A delivered block gives the group its weight (+1, +2, +3, as ML-Agents' scene does),
  and every step costs the group -1 / max_steps.  The round ends when all blocks are delivered
  (done) or after ``max_steps`` (interrupted).  Vector 16: the agent's position / length, for each
  block (weight 1, 2, 3) its offset from the agent / length (0 once delivered), delivered (0/1),
  and the agents on its cell / 3 (0 once delivered), each teammate's offset / length, the round's
  steps / max_steps, zeros.  Stats ``PushBlockCollab/Delivered`` (blocks delivered in the round)
  and ``PushBlockCollab/AllDelivered`` at each round's end.  Random play delivers the light block
  in about 17% of rounds with ``--max-steps 50``, the others practically never; agents that keep
  together and walk forward deliver all three in 7 or 8 steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

from unity_bridge.standin.game import Agent, Behavior, Game

TEAM = 3  # agents in each area's group
BRANCHES = (7,)  # stay, forward, back, and four that do nothing here
FORWARD, BACK = 1, 2


@dataclass
class Area:
    """One scene: a team of TEAM agents in one group, playing its rounds together."""

    group_id: int
    agents: list[Agent]
    steps: int = 0  # this round's
    over: bool = False  # the round ended; the next begins once its ends were reported
    length: float = 8.0


A = TypeVar("A", bound=Area)


class _Teams(Game, Generic[A]):
    """Bookkeeping of team rounds: every agent of an area starts its episode when the round does; an
    agent ``out`` (removed from its group) stays silent until its area's next round."""

    NAME = ""
    VECTOR = 0

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        areas = max(1, agents)
        super().__init__(areas * TEAM, seed, decision_period, max_steps)
        self.behaviors = [Behavior(self.NAME, self.VECTOR, 0, BRANCHES)]
        self.agents = [Agent(slot=i, behavior=self.NAME, group_id=i // TEAM + 1) for i in range(areas * TEAM)]
        self.areas: list[A] = [
            self._area(g + 1, self.agents[g * TEAM : (g + 1) * TEAM]) for g in range(areas)
        ]

    # ---- what each game defines ----------------------------------------------

    def _area(self, group_id: int, agents: list[Agent]) -> A:
        raise NotImplementedError

    def _setup(self, area: A) -> None:
        """Place the round's pieces (the agents' episodes have begun)."""
        raise NotImplementedError

    def _play(self, area: A) -> None:
        """One step of the area's round (the agents' actions are in last_action)."""
        raise NotImplementedError

    # ---- the Game interface ----------------------------------------------------

    def area(self, agent: Agent) -> A:
        return self.areas[agent.group_id - 1]

    def teammates(self, agent: Agent) -> list[Agent]:
        return [a for a in self.area(agent).agents if a is not agent]

    def restart(self, agent: Agent) -> None:
        """The agent's new episode (with its area's new round): a new id, back in its group, and no
        action until one is decided."""
        agent.episode_id = self.new_id()
        agent.steps, agent.done, agent.interrupted, agent.out = 0, False, False, False
        agent.last_action = (np.zeros(0, np.float32), np.zeros(0, np.int64))

    def _new_round(self, area: A) -> None:
        area.steps, area.over = 0, False
        for agent in area.agents:
            self.restart(agent)
        self._setup(area)

    def reset(self) -> None:
        self.frame = 0
        for agent in self.agents:
            agent.reward = agent.group_reward = 0.0
        for area in self.areas:
            self._new_round(area)

    def after_report(self) -> None:
        for agent in self.agents:
            if agent.done or (not agent.out and self.asks(agent)):
                agent.reward = agent.group_reward = 0.0
            if agent.done and agent.out:
                agent.done = False  # removed from its group: its end is reported; silent until the round ends
        for area in self.areas:
            if area.over:
                self._new_round(area)

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for area in self.areas:
            if area.over:  # its ends are not reported yet
                continue
            for agent in area.agents:
                if agent.out:
                    continue
                if agent.slot in actions:
                    agent.last_action = actions[agent.slot]
                agent.steps += 1
            area.steps += 1
            self._play(area)
        self.frame += 1

    def _end_round(self, area: A, interrupted: bool, group_reward: float) -> None:
        for agent in area.agents:
            if not agent.out:
                agent.done, agent.interrupted = True, interrupted
                agent.group_reward += group_reward
        area.over = True

    def _move(self, agent: Agent, area: A) -> int:
        """The agent's move this step (+1 forward, -1 back, 0), its position kept on the track."""
        discrete = agent.last_action[1]
        choice = int(discrete[0]) if len(discrete) else 0
        move = {FORWARD: 1, BACK: -1}.get(choice, 0)
        agent.pos = float(np.clip(agent.pos + move, 0, area.length))
        return move

    def _padded(self, features: list[float]) -> np.ndarray:
        out = np.zeros(self.VECTOR, np.float32)
        out[: len(features)] = features
        return out


@dataclass
class Dungeon(Area):
    dragon: bool = True  # alive: the door is locked


class DungeonEscape(_Teams[Dungeon]):
    NAME = "DungeonEscape"
    VECTOR = 12

    def _area(self, group_id: int, agents: list[Agent]) -> Dungeon:
        return Dungeon(group_id, agents)

    def _setup(self, area: Dungeon) -> None:
        area.length = float(max(4, int(self.parameter("dungeon_length", 8.0))))
        area.dragon = True
        for agent in area.agents:  # anywhere between the dragon and the door
            agent.pos = float(self.rng.integers(1, int(area.length)))

    def _play(self, area: Dungeon) -> None:
        playing = [a for a in area.agents if not a.out]
        for i in self.rng.permutation(len(playing)):  # who meets the dragon first, when two do
            agent = playing[i]
            self._move(agent, area)
            if area.dragon and agent.pos <= 0:
                area.dragon = False  # slain; the door unlocks
                agent.done, agent.out = True, True  # and its slayer leaves the group: done, not interrupted
        remaining = [a for a in area.agents if not a.out]
        at_door = sum(a.pos >= area.length for a in remaining)
        escaped = not area.dragon and at_door >= 2
        if escaped or area.steps >= self.max_steps:
            self._end_round(area, interrupted=not escaped, group_reward=1.0 if escaped else 0.0)
            self.stats.append(("DungeonEscape/Escaped", float(escaped), 0))
            self.stats.append(("DungeonEscape/DragonSlain", float(not area.dragon), 0))

    def observe(self, agent: Agent) -> np.ndarray:
        area = self.area(agent)
        n = area.length
        features = [agent.pos / n, float(area.dragon)]
        for mate in self.teammates(agent):
            features += [0.0, 0.0] if mate.out else [1.0, mate.pos / n]
        features.append(area.steps / max(1, self.max_steps))
        return self._padded(features)

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        area = self.area(agent)
        dragon = [(0.0, 255)] if area.dragon else []
        mates = [(m.pos / area.length, 96) for m in self.teammates(agent) if not m.out]
        return [*dragon, (1.0, 192 if area.dragon else 64), *mates, (agent.pos / area.length, 160)]


@dataclass
class Yard(Area):
    blocks: np.ndarray = field(default_factory=lambda: np.zeros(3))  # by weight 1, 2, 3: their cells
    delivered: np.ndarray = field(default_factory=lambda: np.zeros(3, bool))


class PushBlockCollab(_Teams[Yard]):
    NAME = "PushBlockCollab"
    VECTOR = 16
    WEIGHTS = (1, 2, 3)

    def _area(self, group_id: int, agents: list[Agent]) -> Yard:
        return Yard(group_id, agents)

    def _setup(self, area: Yard) -> None:
        area.length = 8.0
        for agent in area.agents:
            agent.pos = float(self.rng.integers(0, 2))
        area.blocks = self.rng.choice(np.arange(2, 6), len(self.WEIGHTS), replace=False).astype(float)
        area.delivered = np.zeros(len(self.WEIGHTS), bool)

    def _play(self, area: Yard) -> None:
        pushers: dict[float, int] = {}  # cell -> agents stepping forward from it
        for agent in area.agents:
            start = agent.pos
            if self._move(agent, area) > 0 and start < area.length:
                pushers[start] = pushers.get(start, 0) + 1
        delivered = 0.0
        for b, weight in enumerate(self.WEIGHTS):
            cell = float(area.blocks[b])
            if not area.delivered[b] and pushers.get(cell, 0) >= weight:
                area.blocks[b] = cell + 1
                if area.blocks[b] >= area.length:
                    area.delivered[b] = True
                    delivered += weight
        for agent in area.agents:
            agent.group_reward += delivered - 1.0 / max(1, self.max_steps)
        finished = bool(area.delivered.all())
        if finished or area.steps >= self.max_steps:
            self._end_round(area, interrupted=not finished, group_reward=0.0)
            self.stats.append(("PushBlockCollab/Delivered", float(area.delivered.sum()), 0))
            self.stats.append(("PushBlockCollab/AllDelivered", float(finished), 0))

    def observe(self, agent: Agent) -> np.ndarray:
        area = self.area(agent)
        n = area.length
        offsets, crowds = [], []
        for b in range(len(self.WEIGHTS)):
            gone = bool(area.delivered[b])
            offsets.append(0.0 if gone else (area.blocks[b] - agent.pos) / n)
            crowd = sum(a.pos == area.blocks[b] for a in area.agents)
            crowds.append(0.0 if gone else crowd / TEAM)
        mates = [(m.pos - agent.pos) / n for m in self.teammates(agent)]
        features = [agent.pos / n, *offsets, *area.delivered.astype(float), *crowds, *mates]
        features.append(area.steps / max(1, self.max_steps))
        return self._padded(features)

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        area = self.area(agent)
        blocks = [
            (area.blocks[b] / area.length, 64 + 48 * w)
            for b, w in enumerate(self.WEIGHTS)
            if not area.delivered[b]
        ]
        mates = [(m.pos / area.length, 96) for m in self.teammates(agent)]
        return [(1.0, 255), *blocks, *mates, (agent.pos / area.length, 160)]


# --game NAME -> the game, built from (agents = areas, seed, decision_period, max_steps).
TEAMS: dict[str, Callable[[int, int, int, int], Game]] = {
    "dungeonescape": DungeonEscape,
    "pushblockcollab": PushBlockCollab,
}
