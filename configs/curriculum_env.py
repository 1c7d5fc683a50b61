"""Curriculum example: a corridor whose length is the task.

``curriculum_fn`` has the Ray 1.x ``env_task_fn`` signature and is named in
curriculum.yaml with ``curriculum: curriculum_env.curriculum_fn``.
"""

import numpy as np
from gymnasium import spaces

import envsdk


class Corridor(envsdk.CurriculumEnv):
    """Walk right to the end; the task (1..5) sets the corridor length."""

    def __init__(self, config=None):
        super().__init__(config)
        self.task = int(self.config.get("start_task", 1))
        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(2,), dtype=np.float32)

    def get_task(self):
        return self.task

    def set_task(self, task):
        self.task = int(task)

    @property
    def length(self):
        return 2 * self.task

    def _obs(self):
        return np.array([self.pos / self.length, self.task / 5], dtype=np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.steps = 0, 0
        return self._obs(), {"task": self.task}

    def step(self, action):
        self.pos = max(0, self.pos + (1 if action == 1 else -1))
        self.steps += 1
        arrived = self.pos >= self.length
        reward = 1.0 if arrived else -0.01
        return self._obs(), reward, arrived, self.steps >= 40, {"task": self.task}


def curriculum_fn(train_results, task_settable_env, env_ctx):
    """One task level harder every 2000 env steps, as in the tutorial's example."""
    time_steps = train_results.get("timesteps_total") or 0
    return min(5, 1 + time_steps // 2000)
