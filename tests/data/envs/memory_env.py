"""User-style envs for the default model with memory (``use_lstm``).

``CueEnv``: a cue (0 or 1) is shown at the first step only; at the last step the
action equal to the cue pays +1, the other -1, and no other step pays.  The
observation is a Dict of the cue (zeros after the first step) and the step
number, so a policy without memory knows when to answer but not what: its best
mean return is 0, one with memory reaches 1.

``MatrixPairEnv``: two agents, each a ``MatrixEnv`` of the same ``env_config``
(``obs``, ``act``, ``mask``), each with its own policy (``policy_a``, ``policy_b``).
"""

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from matrix_env import MatrixEnv
from ray.rllib.env.multi_agent_env import MultiAgentEnv


class CueEnv(gym.Env):
    def __init__(self, config=None):
        self.length = int((config or {}).get("length", 4))
        self.observation_space = spaces.Dict(
            {"cue": spaces.Box(0.0, 1.0, (2,), np.float32), "step": spaces.Discrete(self.length + 1)}
        )
        self.action_space = spaces.Discrete(2)
        self.rng = np.random.default_rng(0)
        self.cue = 0
        self.t = 0

    def _obs(self):
        cue = np.zeros(2, np.float32)
        if self.t == 0:
            cue[self.cue] = 1.0
        return {"cue": cue, "step": self.t}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.cue = int(self.rng.integers(2))
        self.t = 0
        return self._obs(), {}

    def step(self, action):
        self.t += 1
        last = self.t == self.length
        reward = (1.0 if int(action) == self.cue else -1.0) if last else 0.0
        return self._obs(), reward, last, False, {}


def policy_mapping(agent_id, episode=None, **kwargs):
    return f"policy_{agent_id}"


class MatrixPairEnv(MultiAgentEnv):
    def __init__(self, config=None):
        super().__init__()
        self.envs = {aid: MatrixEnv(config) for aid in ("a", "b")}
        self.possible_agents = list(self.envs)
        self.agents = list(self.envs)
        self.observation_spaces = {aid: env.observation_space for aid, env in self.envs.items()}
        self.action_spaces = {aid: env.action_space for aid, env in self.envs.items()}

    def reset(self, *, seed=None, options=None):
        obs = {}
        for i, (aid, env) in enumerate(self.envs.items()):
            obs[aid], _ = env.reset(seed=None if seed is None else seed + i)
        return obs, {}

    def step(self, actions):
        obs, rewards, truncated = {}, {}, {}
        for aid, action in actions.items():
            obs[aid], rewards[aid], _, truncated[aid], _ = self.envs[aid].step(action)
        return obs, rewards, {"__all__": False}, {**truncated, "__all__": all(truncated.values())}, {}
