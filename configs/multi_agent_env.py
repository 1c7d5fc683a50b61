"""Multi-agent example: two runners race along their own corridors.

``runner_0`` and ``runner_1`` are trained by separate policies, mapped by
``policy_mapping`` (named in multi-agent.yaml as an import path).
"""

import numpy as np
from gymnasium import spaces

import envsdk


class TwoRunners(envsdk.MultiAgentEnv):
    """Each agent moves left/right; reaching the end of its corridor ends its episode."""

    def __init__(self, config=None):
        super().__init__(config)
        self.length = int(self.config.get("length", 5))
        self.agents = self.possible_agents = ["runner_0", "runner_1"]
        space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.observation_spaces = {a: space for a in self.agents}
        self.action_spaces = {a: spaces.Discrete(2) for a in self.agents}

    def _obs(self, agent):
        return np.array([self.pos[agent] / self.length], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        self.pos = {a: 0 for a in self.possible_agents}
        self.done = set()
        self.steps = 0
        return {a: self._obs(a) for a in self.possible_agents}, {}

    def step(self, action_dict):
        self.steps += 1
        obs, rewards, terminated = {}, {}, {}
        for agent, action in action_dict.items():
            self.pos[agent] = max(0, self.pos[agent] + (1 if action == 1 else -1))
            arrived = self.pos[agent] >= self.length
            obs[agent] = self._obs(agent)
            rewards[agent] = 1.0 if arrived else -0.05
            terminated[agent] = arrived
            if arrived:
                self.done.add(agent)
        terminated["__all__"] = len(self.done) == len(self.possible_agents)
        truncated = {"__all__": self.steps >= 40 and not terminated["__all__"]}
        return obs, rewards, terminated, truncated, {}


def policy_mapping(agent_id, episode, **kwargs):
    return "policy_" + agent_id.split("_")[1]


def policy_per_agent(agent_id, episode, **kwargs):
    """One policy per agent, named after it (agent 0 -> policy_0): for envs such as RLlib's
    MultiAgentPendulum, whose agents are numbered."""
    return f"policy_{agent_id}"
