"""The stand-in player's games: small, deterministic given a seed, fast to learn.

* ``chase``: each agent walks a track towards a target (+1 on reaching it,
  -0.01 a step, interrupted after ``max_steps``).  Discrete actions
  (stay/left/right, moves off the track masked), continuous (one axis) or
  hybrid (the axis plus a 2-way branch).  Env parameter ``track_length``.
* ``dodgeball``: two teams (behaviors ``Dodgeball?team=0`` and ``?team=1``)
  on one track.  Throwing at a close opponent may knock it out; the round
  ends when a team is out (group reward +1 / -1) or after ``max_steps``.
* ``seekwatch``: two behaviors of different kinds in one game.  ``Seeker``
  walks towards a target (vector observations; a hybrid action: a
  continuous move plus a gait branch walk / sprint / stand, with sprint
  masked near the target and at the track's ends); ``Watcher`` only sees a
  camera (``--visual N``, no vector) and names the third of the track the
  target is in (Discrete(3), unmasked, +0.1 when right).  A round ends
  when the seeker arrives or after ``max_steps``.  Env parameter ``track_length``.

ML-Agents' example games (3DBall, WallJump, SoccerTwos, ...) are in ``standin.examples``.
Games read their environment parameters through :meth:`Game.parameter` when an agent's episode
starts: a number as it was set, a sampler drawn afresh each time, as Unity's
``EnvironmentParameters.GetWithDefault`` does.  Games know nothing about the protocol;
``standin.player`` serves them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from unity_bridge.samplers import Sampler


@dataclass
class Behavior:
    name: str
    vector_size: int
    continuous: int
    branches: tuple[int, ...]
    vector: bool | None = None  # None: as the command line says (--no-vector)
    camera: bool | None = None  # None: as the command line says (--visual N)
    buffer: tuple[int, int] | None = None  # a BufferSensor: (max entities, entity size); Game.entities


@dataclass
class Agent:
    slot: int
    behavior: str
    group_id: int = 0
    episode_id: int = 0
    pos: float = 0.0
    target: float = 0.0
    steps: int = 0
    reward: float = 0.0
    group_reward: float = 0.0
    done: bool = False
    interrupted: bool = False
    out: bool = False  # dodgeball: knocked out, waits for the round to end
    size: float = 10.0  # the length of its track this episode, where a parameter sets it
    last_action: tuple[np.ndarray, np.ndarray] = field(
        default_factory=lambda: (np.zeros(0, np.float32), np.zeros(0, np.int64))
    )


@dataclass
class Report:
    """One agent's line in an output."""

    agent: Agent
    vector: np.ndarray
    mask: np.ndarray | None  # True = unavailable, as on the wire


class Game:
    """Shared bookkeeping: episode ids, decision periods, stats."""

    behaviors: list[Behavior]

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        self.rng = np.random.default_rng(seed)
        self.num_agents = agents
        self.decision_period = max(1, decision_period)
        self.max_steps = max_steps
        self.parameters: dict[str, float | Sampler] = {}
        self._sampler_rngs: dict[str, np.random.Generator] = {}
        self.log: Callable[[str], None] = lambda line: None  # the player's log
        self.stats: list[tuple[str, float, int]] = []  # (key, value, aggregation)
        self.frame = 0
        self._next_id = 0
        self.agents: list[Agent] = []

    def set_parameter(self, key: str, value: float | Sampler) -> None:
        """What the environment-parameters channel delivered; a sampler gets its own generator seeded
        by the sampler's seed, as Unity's SamplerFactory makes one (System.Random takes |seed|)."""
        self.parameters[key] = value
        if isinstance(value, Sampler):
            self._sampler_rngs[key] = np.random.default_rng(abs(value.seed))

    def parameter(self, key: str, default: float) -> float:
        """The parameter's value for the episode starting now: a sampler draws (logged)."""
        value = self.parameters.get(key, default)
        if not isinstance(value, Sampler):
            return float(value)
        drawn = value.draw(self._sampler_rngs[key])
        self.log(f"environment parameter {key} drawn {drawn:.4g} ({value})")
        return drawn

    def new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def asks(self, agent: Agent) -> bool:
        """Whether the agent requests a decision this frame (staggered decision periods)."""
        return (self.frame + agent.slot) % self.decision_period == 0

    def reports(self) -> list[Report]:
        """Agents to put in this frame's output; clears the per-frame reward and done flags."""
        out = []
        for agent in self.agents:
            if agent.done or (not agent.out and self.asks(agent)):
                out.append(Report(agent, self.observe(agent), self.mask(agent)))
        return out

    def after_report(self) -> None:
        for agent in self.agents:
            if agent.done or (not agent.out and self.asks(agent)):
                agent.reward = agent.group_reward = 0.0
            if agent.done:
                self.restart(agent)

    def observe(self, agent: Agent) -> np.ndarray:
        raise NotImplementedError

    def mask(self, agent: Agent) -> np.ndarray | None:
        return None

    def entities(self, agent: Agent) -> np.ndarray:
        """The agent's BufferSensor rows (as many as there are entities), where its behavior has one."""
        return np.zeros((0, 0), np.float32)

    def restart(self, agent: Agent) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        raise NotImplementedError

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        raise NotImplementedError

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        """(position on [0, 1], brightness) marks for this agent's camera."""
        raise NotImplementedError


class Chase(Game):
    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int, actions: str):
        super().__init__(agents, seed, decision_period, max_steps)
        continuous = 1 if actions in ("continuous", "hybrid") else 0
        branches = {"discrete": (3,), "continuous": (), "hybrid": (2,)}[actions]
        self.mode = actions
        self.behaviors = [Behavior("Chase", 3, continuous, branches)]
        self.agents = [Agent(slot=i, behavior="Chase") for i in range(agents)]

    def restart(self, agent: Agent) -> None:
        agent.episode_id = self.new_id()
        agent.size = max(2, int(self.parameter("track_length", 10.0)))
        agent.pos = float(self.rng.integers(0, agent.size + 1))
        agent.target = agent.pos
        while agent.target == agent.pos:
            agent.target = float(self.rng.integers(0, agent.size + 1))
        agent.steps, agent.done, agent.interrupted = 0, False, False

    def reset(self) -> None:
        self.frame = 0
        for agent in self.agents:
            agent.reward = agent.group_reward = 0.0
            self.restart(agent)

    def observe(self, agent: Agent) -> np.ndarray:
        n = agent.size
        return np.array([agent.pos / n, agent.target / n, (agent.target - agent.pos) / n], np.float32)

    def mask(self, agent: Agent) -> np.ndarray | None:
        if self.mode != "discrete":
            return None
        return np.array([False, agent.pos <= 0, agent.pos >= agent.size])

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            if agent.slot in actions:
                agent.last_action = actions[agent.slot]
            cont, disc = agent.last_action
            if self.mode == "discrete":
                move = {0: 0.0, 1: -1.0, 2: 1.0}.get(int(disc[0]) if len(disc) else 0, 0.0)
            else:
                move = float(cont[0]) if len(cont) else 0.0  # the player checked it is within [-1, 1]
            agent.pos = float(np.clip(agent.pos + move, 0, agent.size))
            agent.steps += 1
            agent.reward -= 0.01
            if abs(agent.pos - agent.target) < 0.5:
                agent.reward += 1.0
                agent.done = True
                self.stats.append(("Chase/Reached", 1.0, 0))
            elif agent.steps >= self.max_steps:
                agent.done = agent.interrupted = True
                self.stats.append(("Chase/Reached", 0.0, 0))
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        return [(agent.target / agent.size, 255), (agent.pos / agent.size, 128)]


class Dodgeball(Game):
    TEAMS = ("Dodgeball?team=0", "Dodgeball?team=1")
    ARENA = 10.0

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        super().__init__(agents, seed, decision_period, max_steps)
        # Branches: move (stay / left / right), throw (no / yes).
        self.behaviors = [Behavior(name, 4, 0, (3, 2)) for name in self.TEAMS]
        self.agents = [
            Agent(slot=t * agents + i, behavior=name, group_id=t + 1)
            for t, name in enumerate(self.TEAMS)
            for i in range(agents)
        ]
        self.round_steps = 0

    def _team(self, agent: Agent) -> int:
        return agent.group_id - 1

    def restart(self, agent: Agent) -> None:
        agent.episode_id = self.new_id()
        agent.pos = (1.0 if self._team(agent) == 0 else self.ARENA - 1.0) + float(self.rng.uniform(-1, 1))
        agent.steps, agent.done, agent.interrupted, agent.out = 0, False, False, False

    def reset(self) -> None:
        self.frame = self.round_steps = 0
        for agent in self.agents:
            agent.reward = agent.group_reward = 0.0
            self.restart(agent)

    def _opponents(self, agent: Agent) -> list[Agent]:
        return [a for a in self.agents if a.group_id != agent.group_id and not a.out]

    def observe(self, agent: Agent) -> np.ndarray:
        rivals = self._opponents(agent)
        nearest = min((a.pos - agent.pos for a in rivals), key=abs, default=0.0)
        alive = len(rivals) / max(1, self.num_agents)
        return np.array([agent.pos / self.ARENA, nearest / self.ARENA, alive, float(agent.out)], np.float32)

    def mask(self, agent: Agent) -> np.ndarray | None:
        close = any(abs(a.pos - agent.pos) <= 3.0 for a in self._opponents(agent))
        return np.array([False, agent.pos <= 0, agent.pos >= self.ARENA, False, not close])

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        for agent in self.agents:
            if agent.out:
                continue
            if agent.slot in actions:
                agent.last_action = actions[agent.slot]
            _, disc = agent.last_action
            move = {0: 0.0, 1: -1.0, 2: 1.0}.get(int(disc[0]) if len(disc) else 0, 0.0)
            agent.pos = float(np.clip(agent.pos + move, 0, self.ARENA))
            throw = len(disc) > 1 and int(disc[1]) == 1
            rivals = [a for a in self._opponents(agent) if abs(a.pos - agent.pos) <= 3.0]
            if throw and rivals and self.rng.random() < 0.5:
                target = min(rivals, key=lambda a: abs(a.pos - agent.pos))
                target.out = True
                agent.reward += 0.1
        self.round_steps += 1
        self.frame += 1
        left = [sum(not a.out for a in self.agents if self._team(a) == t) for t in (0, 1)]
        if 0 in left or self.round_steps >= self.max_steps:
            winner = None if 0 not in left else (1 if left[0] == 0 else 0)
            for agent in self.agents:
                agent.done = True
                agent.interrupted = winner is None
                if winner is not None:
                    agent.group_reward += 1.0 if self._team(agent) == winner else -1.0
            self.stats.append(("Dodgeball/Team0Wins", float(winner == 0), 0))
            self.round_steps = 0

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        marks = [
            (a.pos / self.ARENA, 255 if a.group_id != agent.group_id else 96)
            for a in self.agents
            if not a.out
        ]
        return [*marks, (agent.pos / self.ARENA, 160)]


class SeekWatch(Game):
    SEEKER, WATCHER = "Seeker", "Watcher"
    SPRINT, STAND = 1, 2  # the seeker's gait branch: 0 = walk

    def __init__(self, agents: int, seed: int, decision_period: int, max_steps: int):
        super().__init__(agents, seed, decision_period, max_steps)
        self.behaviors = [
            Behavior(self.SEEKER, 3, 1, (3,), vector=True, camera=False),
            Behavior(self.WATCHER, 0, 0, (3,), vector=False, camera=True),
        ]
        self.agents = [Agent(slot=0, behavior=self.SEEKER), Agent(slot=1, behavior=self.WATCHER)]
        self.length = 10.0
        self.target = 0.0

    def restart(self, agent: Agent) -> None:
        agent.episode_id = self.new_id()
        agent.steps, agent.done, agent.interrupted = 0, False, False
        if agent.behavior == self.SEEKER:
            self.length = float(max(4, int(self.parameter("track_length", 10.0))))
            agent.pos = float(self.rng.integers(0, int(self.length) + 1))
            self.target = agent.pos
            while abs(self.target - agent.pos) < 3:
                self.target = float(self.rng.integers(0, int(self.length) + 1))

    def reset(self) -> None:
        self.frame = 0
        for agent in self.agents:
            agent.reward = agent.group_reward = 0.0
            self.restart(agent)

    def observe(self, agent: Agent) -> np.ndarray:
        if agent.behavior == self.WATCHER:
            return np.zeros(0, np.float32)
        n = self.length
        return np.array([agent.pos / n, self.target / n, (self.target - agent.pos) / n], np.float32)

    def mask(self, agent: Agent) -> np.ndarray | None:
        if agent.behavior == self.WATCHER:
            return None
        near = abs(self.target - agent.pos) < 2.5 or agent.pos <= 0 or agent.pos >= self.length
        return np.array([False, near, False])

    def _region(self) -> int:
        return min(2, int(3 * self.target / (self.length + 1)))

    def step(self, actions: dict[int, tuple[np.ndarray, np.ndarray]]) -> None:
        seeker, watcher = self.agents
        for agent in self.agents:
            if agent.slot in actions:
                agent.last_action = actions[agent.slot]
        cont, gait = seeker.last_action
        speed = {0: 1.0, self.SPRINT: 2.0, self.STAND: 0.0}.get(int(gait[0]) if len(gait) else 0, 1.0)
        move = float(cont[0]) if len(cont) else 0.0  # the player checked it is within [-1, 1]
        seeker.pos = float(np.clip(seeker.pos + speed * move, 0, self.length))
        _, guess = watcher.last_action
        right = len(guess) > 0 and int(guess[0]) == self._region()
        watcher.reward += 0.1 if right else 0.0
        self.stats.append(("SeekWatch/WatcherRight", float(right), 0))
        for agent in self.agents:
            agent.steps += 1
        seeker.reward -= 0.01
        arrived = abs(seeker.pos - self.target) < 0.5
        if arrived or seeker.steps >= self.max_steps:
            seeker.reward += 1.0 if arrived else 0.0
            self.stats.append(("SeekWatch/Arrived", float(arrived), 0))
            for agent in self.agents:
                agent.done, agent.interrupted = True, not arrived
        self.frame += 1

    def scene(self, agent: Agent) -> list[tuple[float, int]]:
        return [(self.target / self.length, 255), (self.agents[0].pos / self.length, 96)]


def make_game(
    name: str, *, agents: int, seed: int, decision_period: int, max_steps: int, actions: str
) -> Game:
    if name == "chase":
        return Chase(agents, seed, decision_period, max_steps, actions)
    if name == "dodgeball":
        return Dodgeball(agents, seed, decision_period, max_steps)
    if name == "seekwatch":
        return SeekWatch(agents, seed, decision_period, max_steps)
    raise SystemExit(
        f"stand-in: unknown game {name!r} (chase, dodgeball, seekwatch, or an example of standin/examples.py)"
    )
