"""A TaskSettable env that records every task it is given (one JSON line per ``set_task``), for
tests of ``environment_parameters``: episodes of 5 steps, any action."""

import json

import numpy as np
from gymnasium import spaces

import envsdk


class ParametersEnv(envsdk.CurriculumEnv):
    def __init__(self, config=None):
        super().__init__(config)
        self.record = self.config.get("record")
        self.task = {}
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(-10.0, 10.0, shape=(2,), dtype=np.float32)

    def get_task(self):
        return dict(self.task)

    def set_task(self, task):
        self.task = dict(task)
        if self.record:
            with open(self.record, "a") as out:
                out.write(json.dumps(self.task) + "\n")

    def _obs(self):
        return np.array([self.steps / 5, self.task.get("wall", 0.0)], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.steps = 0
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        return self._obs(), float(action), False, self.steps >= 5, {}
