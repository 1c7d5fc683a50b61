"""A two-agent, turn-based env whose observations say when they were made.

Agent ``x`` acts at even env steps, ``y`` at odd ones; each step rewards both
agents once they have observed (``x``: ``t``, ``y``: ``1000 + t`` at env step
``t``), so an agent's reward for one of its own steps is the sum of what it
got until it observed again.  An observation is ``[t, 0 or 1]`` (the env step it was made at; 1 for
the last one).  ``act``: ``discrete`` (DQN) or ``box`` (SAC); ``length``: env
steps per episode, ended by termination.
"""

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

AGENTS = ("x", "y")


def reward(agent: str, t: int) -> float:
    return float(t if agent == "x" else 1000 + t)


def policy_mapping(agent_id, episode=None, **kwargs):
    return f"policy_{agent_id}"  # also for envs whose agents are numbered: 0 -> policy_0


class TurnEnv(MultiAgentEnv):
    def __init__(self, config=None):
        super().__init__()
        config = config or {}
        self.length = int(config.get("length", 9))
        act = config.get("act", "discrete")
        action_space = (
            gym.spaces.Discrete(3) if act == "discrete" else gym.spaces.Box(-1, 1, (2,), np.float32)
        )
        self.possible_agents = list(AGENTS)
        self.agents = list(AGENTS)
        self.observation_spaces = {a: gym.spaces.Box(0, 1e4, (2,), np.float32) for a in AGENTS}
        self.action_spaces = {a: action_space for a in AGENTS}
        self.t = 0

    def _obs(self, agents, last=False):
        return {a: np.array([self.t, float(last)], np.float32) for a in agents}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return self._obs(["x"]), {}

    def step(self, actions):
        assert list(actions) == [AGENTS[self.t % 2]], f"step {self.t}: actions of {list(actions)}"
        rewards = {a: reward(a, self.t) for a in AGENTS[: self.t + 1]}  # y observes from step 1 on
        self.t += 1
        done = self.t == self.length
        obs = self._obs(AGENTS if done else [AGENTS[self.t % 2]], last=done)
        return obs, rewards, {"__all__": done}, {"__all__": False}, {}
