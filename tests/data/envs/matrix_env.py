"""A user-style env whose observation and action spaces are chosen by env_config.

Written as a user would write it (plain gymnasium, nothing from envsdk), so
the tests exercise what train.py does with other people's envs.  A hidden
target (0, 1 or 2) changes every step; every observation kind shows it, and
every action kind is rewarded for naming it.  With ``mask: true`` the
observation is ``{"observations": ..., "action_mask": ...}``, one choice of
each discrete branch is forbidden, and a forbidden action raises.

env_config: ``obs`` (see OBS), ``act`` (see ACT), ``mask`` (bool), ``length``.
"""

import gymnasium as gym
import numpy as np
from gymnasium import spaces

OBS = {
    "discrete": spaces.Discrete(3, start=1),
    "multidiscrete": spaces.MultiDiscrete([3, 4]),
    "box": spaces.Box(-1.0, 1.0, (4,), np.float32),
    "box64": spaces.Box(-1.0, 1.0, (4,), np.float64),  # MuJoCo's dtype
    "int": spaces.Box(0, 9, (4,), np.int64),
    "box2d": spaces.Box(-1.0, 1.0, (3, 5), np.float32),
    "image": spaces.Box(0, 255, (24, 24, 3), np.uint8),  # a size with no RLlib default
    "depth": spaces.Box(0.0, 1.0, (20, 20, 1), np.float32),
    "dict": spaces.Dict(
        {"camera": spaces.Box(0, 255, (16, 16, 3), np.uint8), "vector": spaces.Box(-1, 1, (3,), np.float32)}
    ),
    "tuple": spaces.Tuple((spaces.Discrete(3), spaces.Box(-1.0, 1.0, (2,), np.float32))),
}
ACT = {
    "discrete": spaces.Discrete(3),
    "multidiscrete": spaces.MultiDiscrete([3, 2]),
    "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
    "hybrid": spaces.Tuple((spaces.Box(-1.0, 1.0, (1,), np.float32), spaces.Discrete(3))),
}
MASK_SIZE = {"discrete": 3, "multidiscrete": 5, "box": 0, "hybrid": 3}


def _stripe(shape, target, dtype, high):
    image = np.zeros(shape, dtype)
    width = shape[1] // 3
    image[:, target * width : (target + 1) * width, :] = high
    return image


class MatrixEnv(gym.Env):
    def __init__(self, config=None):
        config = dict(config or {})
        self.obs_kind = config.get("obs", "box")
        self.act_kind = config.get("act", "discrete")
        self.masked = bool(config.get("mask", False))
        self.length = int(config.get("length", 8))
        inner = OBS[self.obs_kind]
        self.observation_space_inner = inner
        if self.masked:
            mask = spaces.Box(0, 1, (MASK_SIZE[self.act_kind],), np.int8)
            self.observation_space = spaces.Dict({"observations": inner, "action_mask": mask})
        else:
            self.observation_space = inner
        self.action_space = ACT[self.act_kind]
        self.rng = np.random.default_rng(0)
        self.target = 0
        self.forbidden = 1
        self.t = 0

    def _inner(self):
        t = self.target
        if self.obs_kind == "discrete":
            return t + 1
        if self.obs_kind == "multidiscrete":
            return np.array([t, self.t % 4])
        if self.obs_kind in ("box", "box64", "int"):
            return np.eye(4, dtype=self.observation_space_inner.dtype)[t]
        if self.obs_kind == "box2d":
            grid = np.zeros((3, 5), np.float32)
            grid[t, :] = 1.0
            return grid
        if self.obs_kind == "image":
            return _stripe((24, 24, 3), t, np.uint8, 255)
        if self.obs_kind == "depth":
            return _stripe((20, 20, 1), t, np.float32, 1.0)
        if self.obs_kind == "dict":
            return {
                "camera": _stripe((16, 16, 3), t, np.uint8, 200),
                "vector": np.eye(3, dtype=np.float32)[t],
            }
        return (t, self.rng.uniform(-1, 1, 2).astype(np.float32))

    def _obs(self):
        inner = self._inner()
        if not self.masked:
            return inner
        mask = np.ones(MASK_SIZE[self.act_kind], np.int8)
        mask[self.forbidden] = 0
        if self.act_kind == "multidiscrete":
            mask[3 + self.t % 2] = 0  # the second branch: one of its two choices is forbidden
        return {"observations": inner, "action_mask": mask}

    def _new_target(self):
        self.target = int(self.rng.integers(3))
        self.forbidden = (self.target + 1 + int(self.rng.integers(2))) % 3  # never the target

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self._new_target()
        return self._obs(), {}

    def _check_mask(self, choice, second=None):
        if not self.masked:
            return
        if choice == self.forbidden:
            raise RuntimeError(f"masked action {choice} received (forbidden: {self.forbidden})")
        if second is not None and second == self.t % 2:
            raise RuntimeError(f"masked action {second} received in the second branch")

    def step(self, action):
        hybrid = self.act_kind == "hybrid"
        part, space = (action[1], self.action_space[1]) if hybrid else (action, self.action_space)
        if not isinstance(space, spaces.Box) and not space.contains(part):
            raise RuntimeError(f"action {part!r} is not in {space}")
        if self.act_kind == "discrete":
            self._check_mask(int(action))
            reward = float(int(action) == self.target)
        elif self.act_kind == "multidiscrete":
            self._check_mask(int(action[0]), int(action[1]))
            reward = float(int(action[0]) == self.target)
        elif self.act_kind == "box":
            reward = 1.0 - abs(float(action[0]) - (self.target - 1))
        else:
            self._check_mask(int(action[1]))
            reward = float(int(action[1]) == self.target) + 0.5 * (
                1 - abs(float(action[0][0]) - (self.target - 1))
            )
        self.t += 1
        self._new_target()
        return self._obs(), reward, False, self.t >= self.length, {}
