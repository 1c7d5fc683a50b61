"""A cooperative multi-agent env with a group, for run: POCA on an env that is not a Unity game.

Three agents in one group (the config's ``groups`` names it; nothing in the infos says so).  Actions
(Discrete 3): wait, press the switch, push the door.  The first agent to press the switch leaves
the group at once (its episode terminates, reward 0) and unlocks the door; the door opens when the
two others push it at the same step: the round ends with a group reward of +1 to both, given only
in ``infos[agent]["group_reward"]`` (the rewards stay 0).  ``max_steps`` (default 12) truncates it.
Observations: whether the door is unlocked, the agent's slot and the round's progress.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

AGENTS = ("a", "b", "c")
WAIT, PRESS, PUSH = 0, 1, 2


class RelayEnv(MultiAgentEnv):
    def __init__(self, config: dict[str, Any] | None = None):
        super().__init__()
        self.max_steps = int((config or {}).get("max_steps", 12))
        self.possible_agents = list(AGENTS)
        self.agents = list(AGENTS)
        self.observation_spaces = {a: gym.spaces.Box(0.0, 1.0, (3,), np.float32) for a in AGENTS}
        self.action_spaces = {a: gym.spaces.Discrete(3) for a in AGENTS}
        self.unlocked = False
        self.t = 0

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([float(self.unlocked), AGENTS.index(agent) / 2, self.t / self.max_steps], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.agents = list(AGENTS)
        self.unlocked, self.t = False, 0
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        self.t += 1
        left = None
        if not self.unlocked:
            pressing = [a for a in self.agents if int(actions.get(a, WAIT)) == PRESS]
            if pressing:
                left, self.unlocked = pressing[0], True
        staying = [a for a in self.agents if a != left]
        opened = self.unlocked and left is None and all(int(actions.get(a, WAIT)) == PUSH for a in staying)
        out = len(staying) == 2 and opened
        timed_out = self.t >= self.max_steps
        obs = {a: self._obs(a) for a in self.agents}
        rewards = {a: 0.0 for a in self.agents}
        infos: dict[str, dict] = {a: {"group_reward": 1.0 if out else 0.0} for a in self.agents}
        terminateds = {a: out or a == left for a in self.agents}
        truncateds = {a: timed_out and not terminateds[a] for a in self.agents}
        terminateds["__all__"] = out
        truncateds["__all__"] = timed_out and not out
        self.agents = [a for a in staying if not (out or timed_out)]
        return obs, rewards, terminateds, truncateds, infos
