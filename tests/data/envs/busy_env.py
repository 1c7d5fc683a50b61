"""A CartPole whose every step costs ``env_config["ms"]`` milliseconds, as a simulator's physics does:
``cost: busy`` spins on the CPU, ``cost: sleep`` waits (a game on cores of its own).

Written as a user would write it (plain gymnasium, nothing from envsdk).
"""

import time

import gymnasium as gym


class BusyCartPole(gym.Env):
    def __init__(self, config=None):
        config = config or {}
        self.seconds = float(config.get("ms", 2.0)) / 1000.0
        self.busy = config.get("cost", "busy") == "busy"
        self.env = gym.make("CartPole-v1")
        self.observation_space = self.env.observation_space
        self.action_space = self.env.action_space

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        start = time.perf_counter()
        out = self.env.step(action)
        if self.busy:
            while time.perf_counter() - start < self.seconds:
                pass
        else:
            time.sleep(max(0.0, self.seconds - (time.perf_counter() - start)))
        return out
