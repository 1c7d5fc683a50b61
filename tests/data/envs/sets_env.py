"""An env whose observation holds a set of entities (envsdk's EntitySet, as a Unity BufferSensor's).

Each step shows 1 to 6 entities in random rows of 6 (the others rows of zeros), each a kind
one-hot of 2 and a random position; a vector says which kind is asked about.  The action says
whether an entity of that kind is in the set: +1 when right.  Episodes last 8 steps.
"""

import gymnasium as gym
import numpy as np

from envsdk.envs.spaces import EntitySet

ROWS = 6


class SetsEnv(gym.Env):
    def __init__(self, config=None):
        self.observation_space = gym.spaces.Dict(
            {"asked": gym.spaces.Box(0.0, 1.0, (2,), np.float32), "entities": EntitySet(ROWS, 3)}
        )
        self.action_space = gym.spaces.Discrete(2)
        self.rng = np.random.default_rng(0)
        self.answer = 0
        self.t = 0

    def _observe(self):
        count = int(self.rng.integers(1, ROWS + 1))
        kinds = self.rng.integers(0, 2, count)
        rows = np.zeros((ROWS, 3), np.float32)
        at = self.rng.permutation(ROWS)[:count]
        rows[at, kinds] = 1.0
        rows[at, 2] = self.rng.uniform(-1, 1, count)
        asked = int(self.rng.integers(0, 2))
        self.answer = int(asked in kinds)
        return {"asked": np.eye(2, dtype=np.float32)[asked], "entities": rows}

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        reward = float(int(action) == self.answer)
        self.t += 1
        return self._observe(), reward, False, self.t >= 8, {}
