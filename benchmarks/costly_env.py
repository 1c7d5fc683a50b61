"""Gymnasium envs whose steps cost a fixed time, as a game's or a simulator's do.

Importing this module registers, for each env of the solve suite, ids such as
``CartPole-v1-busy1ms`` (each step burns 1 ms of this process's CPU: the cost competes for the
machine's cores, as a simulator's physics does) and ``CartPole-v1-sleep1ms`` (each step waits
1 ms: the cost is spent elsewhere, as a game's on cores of its own). Both tools load them as
gymnasium's ``costly_env:ID``, with ``benchmarks/`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym

BASE_ENVS = ("CartPole-v1", "Acrobot-v1", "LunarLander-v3", "Pendulum-v1")
COSTS = ("busy", "sleep")
MILLISECONDS = (1, 2, 5)


class CostlyStep(gym.Wrapper):
    """``step`` and ``reset`` take at least ``ms`` milliseconds each: ``busy`` spins on the CPU,
    ``sleep`` waits."""

    def __init__(self, env: gym.Env, ms: float, cost: str) -> None:
        super().__init__(env)
        if cost not in COSTS:
            raise ValueError(f"cost must be one of {COSTS}, got {cost!r}")
        self.seconds, self.busy = ms / 1000.0, cost == "busy"

    def _spend(self, start: float) -> None:
        if self.busy:
            while time.perf_counter() - start < self.seconds:
                pass
        else:
            left = self.seconds - (time.perf_counter() - start)
            if left > 0:
                time.sleep(left)

    def step(self, action: Any) -> Any:
        start = time.perf_counter()
        out = self.env.step(action)
        self._spend(start)
        return out

    def reset(self, **kwargs: Any) -> Any:
        start = time.perf_counter()
        out = self.env.reset(**kwargs)
        self._spend(start)
        return out


def make(env: str, ms: float, cost: str, **kwargs: Any) -> gym.Env:
    return CostlyStep(gym.make(env, **kwargs), ms, cost)


def env_id(env: str, ms: float, cost: str) -> str:
    return f"{env}-{cost}{ms:g}ms"


for _env in BASE_ENVS:
    for _cost in COSTS:
        for _ms in MILLISECONDS:
            gym.register(
                env_id(_env, _ms, _cost),
                entry_point=make,
                kwargs={"env": _env, "ms": _ms, "cost": _cost},
                max_episode_steps=None,  # the base env's own time limit applies
                disable_env_checker=True,
            )
