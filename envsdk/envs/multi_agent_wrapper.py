"""A base for wrappers around a multi-agent env: RLlib's ``MultiAgentEnv`` has no wrapper class.

It mirrors the wrapped env's agents and spaces (RLlib's vector env reads them from the outermost
env's ``unwrapped``, which a ``MultiAgentEnv`` is itself), forwards what it does not override,
and keeps ``agents`` current after each reset and step.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from ray.rllib.env.multi_agent_env import MultiAgentEnv


class MultiAgentWrapper(MultiAgentEnv):
    """``env`` as it is; subclasses change observations (``observation_spaces``) or steps."""

    def __init__(self, env: MultiAgentEnv, observation_spaces: dict[Any, gym.Space] | None = None):
        super().__init__()  # type: ignore[no-untyped-call]  # RLlib's MultiAgentEnv
        self.env = env
        self.possible_agents = list(getattr(env, "possible_agents", None) or [])
        self.agents = list(getattr(env, "agents", None) or [])
        spaces = observation_spaces or {}
        # an env without possible_agents may still list its agents' spaces (adapters/old_gym.py: EveryAgent)
        known = self.possible_agents or list(getattr(env, "observation_spaces", None) or {})
        self.observation_spaces = {
            a: spaces[a] if a in spaces else env.get_observation_space(a) for a in known
        }
        self.action_spaces = {a: env.get_action_space(a) for a in known}
        self.observation_space = gym.spaces.Dict({str(a): s for a, s in self.observation_spaces.items()})
        self.action_space = gym.spaces.Dict({str(a): s for a, s in self.action_spaces.items()})
        self.metadata = getattr(env, "metadata", {})
        self.render_mode = getattr(env, "render_mode", None)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        out = self.env.reset(seed=seed, options=options)
        self.agents = list(self.env.agents)
        return out

    def step(  # type: ignore[override]  # RLlib's MultiAgentEnv.step clashes with gym.Env.step's types
        self, action_dict: dict
    ) -> tuple[dict, dict, dict, dict, dict]:
        out = self.env.step(action_dict)
        self.agents = list(self.env.agents)
        return out

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name == "env":
            raise AttributeError(name)
        return getattr(self.env, name)
