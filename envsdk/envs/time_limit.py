"""Episodes cut after a number of steps, for single- and multi-agent envs alike.

Ray 1.x's ``horizon`` (training) and rollout.py's ``--max-episode-steps`` use it: gymnasium's
``TimeLimit`` for a gymnasium env, :class:`MultiAgentTimeLimit` for RLlib's ``MultiAgentEnv``
(every agent still in the episode is truncated, and ``__all__``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk import internals
from envsdk.envs.multi_agent_wrapper import MultiAgentWrapper


class MultiAgentTimeLimit(MultiAgentWrapper):
    """A multi-agent env whose episodes are truncated after ``max_episode_steps`` env steps."""

    def __init__(self, env: MultiAgentEnv, max_episode_steps: int):
        super().__init__(env)
        self.max_episode_steps = max_episode_steps
        self.elapsed = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.elapsed = 0
        return super().reset(seed=seed, options=options)

    def step(  # type: ignore[override]  # RLlib's MultiAgentEnv.step clashes with gym.Env.step's types
        self, action_dict: dict
    ) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terminateds, truncateds, infos = super().step(action_dict)
        self.elapsed += 1
        if self.elapsed >= self.max_episode_steps and not (
            terminateds.get("__all__") or truncateds.get("__all__")
        ):
            truncateds = {**truncateds, **{a: True for a in obs if not terminateds.get(a)}, "__all__": True}
        return obs, rewards, terminateds, truncateds, infos


def limit(env: Any, steps: int) -> Any:
    """``env`` with its episodes cut after ``steps`` env steps."""
    if isinstance(env, MultiAgentEnv):
        return MultiAgentTimeLimit(env, steps)
    return gym.wrappers.TimeLimit(env, steps)


def own_limit(env: Any) -> int | None:
    """The step limit ``env`` already has (a gymnasium spec's, or one of these wrappers'), else None."""
    while env is not None:
        if isinstance(env, MultiAgentTimeLimit):
            return env.max_episode_steps
        if isinstance(env, gym.wrappers.TimeLimit):  # its spec has no limit where the env has no spec
            return internals.time_limit_steps(env)
        spec = getattr(env, "spec", None)  # gymnasium's TimeLimit writes its limit into the spec
        if spec is not None and getattr(spec, "max_episode_steps", None):
            return int(spec.max_episode_steps)
        env = getattr(env, "env", None)
    return None
