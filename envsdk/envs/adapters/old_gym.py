"""Run environments written for the old ``gym`` API unchanged.

Old-API envs return only ``obs`` from ``reset()`` and a 4-tuple
``(obs, reward, done, info)`` from ``step()``; their spaces may come from the
``gym`` package.  :class:`LegacyGymAdapter` presents such an env as a
gymnasium env; :func:`needs_adapter` decides when it is applied.  Where the
``gym`` package itself is not installed (it has been unmaintained since
0.26 and breaks on numpy 2), :func:`alias_gym` lets ``import gym`` load
gymnasium, its successor, so the seed tutorials' env files import unchanged.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import sys
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np

from envsdk.errors import UserError


class _GymAlias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``gym`` and ``gym.X`` imports answered with ``gymnasium`` and ``gymnasium.X``."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "gym" and not fullname.startswith("gym."):
            return None
        real = "gymnasium" + fullname[3:]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=fullname == "gym")

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module("gymnasium" + spec.name[3:])

    def exec_module(self, module: ModuleType) -> None:
        """The gymnasium module is already executed."""


def alias_gym() -> bool:
    """Answer ``import gym`` with gymnasium when gym is not installed; True if the alias is (now) on."""
    if any(isinstance(f, _GymAlias) for f in sys.meta_path):
        return True
    if importlib.util.find_spec("gym") is not None:
        return False
    sys.meta_path.append(_GymAlias())
    return True


def needs_adapter(env: Any) -> bool:
    """True for envs that follow the pre-0.26 gym API.

    A gymnasium env whose ``reset`` takes ``seed`` (by name or through
    ``**kwargs``, as wrappers often write it) follows the new API; the seed
    tutorials' ``reset(self)`` on a ``gym.Env`` (gymnasium under the alias) does not.
    """
    if isinstance(env, gym.Env):
        params = inspect.signature(env.reset).parameters
        if "seed" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
            return False
    return hasattr(env, "reset") and hasattr(env, "step") and hasattr(env, "action_space")


def to_gymnasium_space(space: Any) -> gym.Space:
    """Convert a ``gym.spaces`` (or look-alike) space to its gymnasium twin."""
    if isinstance(space, gym.Space):
        return space
    kind = type(space).__name__
    if kind == "Box":
        low, high = (np.asarray(b, dtype=space.dtype) for b in (space.low, space.high))
        return gym.spaces.Box(low, high, shape=space.shape, dtype=space.dtype)
    if kind == "Discrete":
        return gym.spaces.Discrete(int(space.n), start=int(getattr(space, "start", 0)))
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.asarray(space.nvec))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(space.n)
    if kind == "Tuple":
        return gym.spaces.Tuple([to_gymnasium_space(s) for s in space.spaces])
    if kind == "Dict":
        return gym.spaces.Dict({k: to_gymnasium_space(s) for k, s in space.spaces.items()})
    raise UserError(
        f"cannot convert space of type {type(space).__qualname__} to gymnasium",
        "give the env gym(nasium) spaces: Box, Discrete, MultiDiscrete, MultiBinary, Tuple or Dict",
    )


def _cast(obs: Any, space: gym.Space) -> Any:
    """Old envs often return float64 or lists where the space says float32."""
    if isinstance(space, gym.spaces.Box):
        return np.asarray(obs, dtype=space.dtype).reshape(space.shape)
    if isinstance(space, gym.spaces.Dict):
        return {k: _cast(obs[k], s) for k, s in space.spaces.items()}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_cast(o, s) for o, s in zip(obs, space.spaces, strict=True))
    if isinstance(space, gym.spaces.Discrete):
        return int(obs)
    return obs


class LegacyGymAdapter(gym.Env):
    """Presents an old-API gym env through the gymnasium API."""

    def __init__(self, inner: Any):
        super().__init__()
        self.inner = inner
        self.observation_space = to_gymnasium_space(inner.observation_space)
        self.action_space = to_gymnasium_space(inner.action_space)
        self.metadata = dict(getattr(inner, "metadata", None) or {})
        self.render_mode = getattr(inner, "render_mode", None) or "rgb_array"

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        if seed is not None and hasattr(self.inner, "seed"):
            self.inner.seed(seed)
        out = self.inner.reset()
        return _cast(out, self.observation_space), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        out = self.inner.step(action)
        if len(out) == 5:  # already new-style step; only reset was old
            obs, reward, terminated, truncated, info = out
        else:
            obs, reward, done, info = out
            truncated = bool((info or {}).get("TimeLimit.truncated", False))
            terminated = bool(done) and not truncated
        return _cast(obs, self.observation_space), float(reward), terminated, truncated, info or {}

    def render(self) -> Any:
        try:
            return self.inner.render(mode="rgb_array")
        except TypeError:
            return self.inner.render()

    def close(self) -> None:
        if hasattr(self.inner, "close"):
            self.inner.close()


class EveryAgent(dict):
    """An agent -> space mapping for a multi-agent env that declares one space for all its agents
    (the older MultiAgentEnv style: a non-Dict ``observation_space``/``action_space``), which
    RLlib's vector env would iterate as if it were per agent.  It lists the agents known when the
    env is built, and answers the same space for any other."""

    def __init__(self, space: gym.Space, agents: tuple[Any, ...]):
        super().__init__({agent: space for agent in agents})
        self.space = space

    def __missing__(self, agent: Any) -> gym.Space:
        return self.space


def share_spaces(env: Any) -> None:
    """Give a multi-agent env that declares one space for all its agents per-agent spaces
    (:class:`EveryAgent`), listing its ``possible_agents``, else the agents of one ``reset()``:
    RLlib's vector env reads them before its first reset."""
    from ray.rllib.env.multi_agent_env import MultiAgentEnv

    target = getattr(env, "unwrapped", env)
    if not isinstance(target, MultiAgentEnv):
        return
    shared = {
        kind: space
        for kind in ("observation", "action")
        if getattr(target, f"{kind}_spaces", None) is None
        and isinstance(space := getattr(target, f"{kind}_space", None), gym.Space)
    }
    if not shared:
        return
    agents = tuple(getattr(target, "possible_agents", None) or ())
    if not agents and all(not isinstance(space, gym.spaces.Dict) for space in shared.values()):
        agents = tuple(env.reset()[0])
    for kind, space in shared.items():
        if not (isinstance(space, gym.spaces.Dict) and any(a in space.spaces for a in agents)):
            setattr(target, f"{kind}_spaces", EveryAgent(space, agents))
