"""A two-player game where skill matters, for self-play (light cycles, as in Tron).

Two cycles drive on a square grid and leave a wall behind them.  Each step
both turn left, go straight or turn right at once.  A cycle that drives into
a wall, a trail, or the cell the other one enters is out.  One out: it loses
(-1) and the other wins (+1); both out, or time up: a draw (0).

Random play crashes within a few steps; a policy that looks ahead survives,
and a better one boxes its opponent in.  Each player sees the grid around its
head, turned so that it faces up: what is blocked, and the other head.

``player_0`` is team 0 and ``player_1`` team 1, and both play one policy,
``cycle``: :meth:`LightCycles.self_play_teams` says so, and
``cycles-selfplay.yaml`` trains it against its past selves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

import envsdk

HEADINGS = np.array([(-1, 0), (0, 1), (1, 0), (0, -1)])  # up, right, down, left (row, col)
PLAYERS = ("player_0", "player_1")


def teams(agent_id: Any) -> tuple[str, int]:
    """Both players play the policy ``cycle``; ``player_N`` is team N."""
    return "cycle", int(str(agent_id).rsplit("_", 1)[1])


class LightCycles(envsdk.MultiAgentEnv):
    """``env_config``: ``size`` (grid side, default 8), ``view`` (cells seen around the head, default 2)."""

    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__(config)
        self.size = int(self.config.get("size", 8))
        self.view = int(self.config.get("view", 2))
        side = 2 * self.view + 1
        self.agents = self.possible_agents = list(PLAYERS)
        space = spaces.Box(0.0, 1.0, shape=(2 * side * side,), dtype=np.float32)
        self.observation_spaces = {a: space for a in self.agents}
        self.action_spaces = {a: spaces.Discrete(3) for a in self.agents}
        self.rng = np.random.default_rng()

    @classmethod
    def self_play_teams(cls, env_config: dict[str, Any]) -> Any:
        return teams

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        n = self.size
        self.blocked = np.zeros((n, n), dtype=bool)
        rows = self.rng.integers(1, n - 1, size=2)
        self.head = {PLAYERS[0]: np.array([rows[0], 1]), PLAYERS[1]: np.array([rows[1], n - 2])}
        self.heading = {PLAYERS[0]: 1, PLAYERS[1]: 3}
        for head in self.head.values():
            self.blocked[tuple(head)] = True
        self.steps = 0
        return {a: self._obs(a) for a in PLAYERS}, {}

    def _obs(self, agent: str) -> np.ndarray:
        v, n = self.view, self.size
        other = self.head[PLAYERS[1 - PLAYERS.index(agent)]]
        padded = np.ones((n + 2 * v, n + 2 * v), dtype=np.float32)  # off the grid is blocked
        padded[v : v + n, v : v + n] = self.blocked
        heads = np.zeros_like(padded)
        heads[tuple(other + v)] = 1.0
        r, c = self.head[agent] + v
        window = np.stack(
            [padded[r - v : r + v + 1, c - v : c + v + 1], heads[r - v : r + v + 1, c - v : c + v + 1]]
        )
        return np.rot90(window, k=self.heading[agent], axes=(1, 2)).reshape(-1).astype(np.float32)

    def step(self, action_dict: dict[str, int]) -> tuple[dict, dict, dict, dict, dict]:
        self.steps += 1
        target = {}
        for agent in PLAYERS:
            self.heading[agent] = (self.heading[agent] + int(action_dict.get(agent, 1)) - 1) % 4
            target[agent] = self.head[agent] + HEADINGS[self.heading[agent]]
        n = self.size
        out = {
            a: bool(not (0 <= t[0] < n and 0 <= t[1] < n) or self.blocked[tuple(t)])
            for a, t in target.items()
        }
        if np.array_equal(target[PLAYERS[0]], target[PLAYERS[1]]):
            out = dict.fromkeys(PLAYERS, True)
        for agent in PLAYERS:
            self.head[agent] = target[agent]
            if not out[agent]:
                self.blocked[tuple(target[agent])] = True
            else:  # keep the head on the grid for the last observation
                self.head[agent] = np.clip(target[agent], 0, n - 1)
        over = any(out.values())
        if over and not all(out.values()):
            rewards = {a: -1.0 if out[a] else 1.0 for a in PLAYERS}
        else:
            rewards = dict.fromkeys(PLAYERS, 0.0)
        time_up = not over and self.steps >= n * n
        obs = {a: self._obs(a) for a in PLAYERS}
        terminated = {**dict.fromkeys(PLAYERS, over), "__all__": over}
        truncated = {**dict.fromkeys(PLAYERS, time_up), "__all__": time_up}
        return obs, rewards, terminated, truncated, {}
