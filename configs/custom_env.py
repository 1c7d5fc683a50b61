"""The custom env of the Ray 1.x tutorial, written to the old gym API on purpose.

``reset()`` returns only the observation and ``step()`` a 4-tuple: train.py
adapts it automatically (one notice line).  The agent walks a corridor; the
goal is at the right end.
"""

import numpy as np
from gymnasium import spaces


class CustomEnv:
    """Corridor of ``length`` cells; actions: 0 = left, 1 = right."""

    def __init__(self, config=None):
        self.length = int((config or {}).get("length", 6))
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.pos = 0
        self.steps = 0

    def reset(self):
        self.pos, self.steps = 0, 0
        return [self.pos / self.length]

    def step(self, action):
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        self.steps += 1
        done = self.pos >= self.length or self.steps >= 50
        reward = 1.0 if self.pos >= self.length else -0.05
        return [self.pos / self.length], reward, done, {}
