"""Action-masking example: pick the one allowed action of several.

Each step a random subset of the 6 actions is allowed; the env raises if a
forbidden action arrives, so a training run that finishes is proof that the
default model honoured every mask.
"""

import numpy as np
from gymnasium import spaces

import envsdk


@envsdk.register("MaskedPick-v0", max_episode_steps=20)
class MaskedPick(envsdk.ActionMaskEnv):
    """Reward 1 for the allowed action equal to the observed target, else 0."""

    N = 6

    def __init__(self, config=None):
        super().__init__(config)
        self.action_space = spaces.Discrete(self.N)
        inner = spaces.Box(0.0, 1.0, shape=(self.N,), dtype=np.float32)
        self.observation_space = self.masked_space(inner, self.action_space)
        self.mask = np.ones(self.N, dtype=np.int8)
        self.target = 0

    def action_mask(self):
        return self.mask

    def _draw(self):
        self.mask = (self.np_random.random(self.N) < 0.5).astype(np.int8)
        self.mask[self.np_random.integers(self.N)] = 1
        self.target = int(self.np_random.choice(np.flatnonzero(self.mask)))
        onehot = np.zeros(self.N, dtype=np.float32)
        onehot[self.target] = 1.0
        return self.masked(onehot)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._draw(), {}

    def step(self, action):
        if not self.mask[action]:
            raise RuntimeError(f"forbidden action {action} taken under mask {self.mask.tolist()}")
        reward = 1.0 if action == self.target else 0.0
        return self._draw(), reward, False, False, {}
