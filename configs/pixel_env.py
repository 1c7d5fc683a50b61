"""Image observations: say which half of the frame the lit cell is in.

No ``render()``: ``rollout.py --video`` films the observations themselves.
``env_config: {depth: true}`` gives float depth maps (lit cell near, the rest
far) instead of 8-bit grayscale frames; both have 16x16 = 256 values, so a
policy trained on one runs on the other.
"""

import numpy as np
from gymnasium import spaces

import envsdk

SIZE = 16


@envsdk.register("LitPixel-v0", max_episode_steps=16)
class LitPixel(envsdk.Env):
    """Action 0 = left half, 1 = right half; reward 1 when right."""

    def __init__(self, config=None):
        super().__init__(config)
        self.depth = bool(self.config.get("depth", False))
        self.action_space = spaces.Discrete(2)
        if self.depth:
            self.observation_space = spaces.Box(0.0, 10.0, shape=(SIZE, SIZE), dtype=np.float32)
        else:
            self.observation_space = spaces.Box(0, 255, shape=(SIZE, SIZE, 1), dtype=np.uint8)
        self.cell = (0, 0)

    def _frame(self):
        row, col = self.cell = tuple(int(v) for v in self.np_random.integers(SIZE, size=2))
        if self.depth:
            frame = np.full((SIZE, SIZE), 10.0, dtype=np.float32)
            frame[row, col] = 1.0
            return frame
        frame = np.zeros((SIZE, SIZE, 1), dtype=np.uint8)
        frame[row, col] = 255
        return frame

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._frame(), {"cell": self.cell}

    def step(self, action):
        reward = 1.0 if int(action) == int(self.cell[1] >= SIZE // 2) else 0.0
        return self._frame(), reward, False, False, {"cell": self.cell}
