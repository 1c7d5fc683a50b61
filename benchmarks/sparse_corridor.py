"""A sparse-reward task for the reward-signal benchmark: a switch at the far end of a corridor, and
the one reward back at the start once the switch is on (Pyramids' switch, then its brick).

The agent starts in cell 0 of ``length`` cells and sees its cell (one-hot) and the switch (0/1).
Actions: stay, right, left, press.  Pressing in the last cell turns the switch on; reaching cell 0
with the switch on pays +1 and ends the episode; ``max_steps`` (default 3 x length) cuts it.
Random play finds the reward in well under 1% of episodes at the default length
(``python benchmarks/sparse_corridor.py`` measures it).  Registered as ``sparse_corridor:SwitchCorridor-v0``.
"""

from __future__ import annotations

import sys
from typing import Any

import gymnasium as gym
import numpy as np

STAY, RIGHT, LEFT, PRESS = range(4)


class SwitchCorridor(gym.Env):
    def __init__(self, length: int = 8, max_steps: int | None = None) -> None:
        self.length = int(length)
        self.max_steps = int(max_steps or 3 * self.length)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.length + 1,), np.float32)
        self.action_space = gym.spaces.Discrete(4)

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.length + 1, np.float32)
        obs[self.pos] = 1.0
        obs[-1] = float(self.switch)
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.pos, self.switch, self.steps = 0, False, 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        action = int(action)
        self.steps += 1
        if action == RIGHT:
            self.pos = min(self.pos + 1, self.length - 1)
        elif action == LEFT:
            self.pos = max(self.pos - 1, 0)
        elif action == PRESS and self.pos == self.length - 1:
            self.switch = True
        done = self.switch and self.pos == 0
        return self._obs(), float(done), done, self.steps >= self.max_steps and not done, {}


gym.register("SwitchCorridor-v0", entry_point=f"{__name__}:SwitchCorridor")


def expert(obs: np.ndarray) -> int:
    """The shortest way (``rollout.py --policy sparse_corridor.py:expert`` records it): right to the
    switch, press it, left to the start."""
    length = len(obs) - 1
    if obs[-1] > 0.5:
        return LEFT
    return PRESS if int(np.argmax(obs[:length])) == length - 1 else RIGHT


def random_success(length: int, episodes: int, seed: int = 0) -> float:
    """The share of episodes that uniformly random play ends with the reward."""
    env, rng, found = SwitchCorridor(length), np.random.default_rng(seed), 0
    for _ in range(episodes):
        env.reset()
        while True:
            _, reward, terminated, truncated, _ = env.step(rng.integers(4))
            if terminated or truncated:
                found += reward > 0
                break
    return found / episodes


if __name__ == "__main__":
    length = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    print(f"length {length}: random play succeeds in {random_success(length, 100_000):.4%} of episodes")
