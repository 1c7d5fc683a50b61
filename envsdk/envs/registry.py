"""Finding environments: our registry, entry points, gymnasium ids, import paths.

``env:`` in a YAML file may be

* an id registered with :func:`register` (or through the ``envsdk.envs``
  entry-point group of an installed package),
* a gymnasium id such as ``CartPole-v1``,
* an import path ``module.Class`` or ``module:factory``, looked up next to
  the YAML file and in the working directory.

:func:`resolve_env` turns that string into a :class:`ResolvedEnv` whose
``name`` is what RLlib is given and whose ``make`` builds one instance.
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import gymnasium as gym

from envsdk.envs.compat import LegacyGymAdapter, needs_adapter
from envsdk.envs.imports import import_ref, split_ref
from envsdk.errors import UserError, closest
from envsdk.notices import notice

ENTRY_POINT_GROUP = "envsdk.envs"
_REGISTRY: dict[str, EnvFactory] = {}


class EnvFactory:
    """Picklable ``env_config -> env`` creator handed to RLlib.

    Passes ``env_config`` to the target when it takes an argument, wraps
    old-gym-API envs in the adapter and applies an episode step limit.
    """

    def __init__(self, target: Callable[..., Any], name: str, max_episode_steps: int | None = None):
        self.target = target
        self.name = name
        self.max_episode_steps = max_episode_steps

    def __call__(self, env_config: dict | None = None) -> Any:
        env = (
            self.target(env_config if env_config is not None else {})
            if _takes_argument(self.target)
            else self.target()
        )
        if needs_adapter(env):
            notice(f"env '{self.name}' uses the old gym API (reset -> obs, step -> 4-tuple); adapting it")
            env = LegacyGymAdapter(env)
        if self.max_episode_steps and isinstance(env, gym.Env):
            env = gym.wrappers.TimeLimit(env, self.max_episode_steps)
        return env


def _takes_argument(target: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(target).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in params)


def register(env_id: str, *, max_episode_steps: int | None = None) -> Callable:
    """Class or factory decorator: make ``env_id`` usable in YAML and gymnasium.make.

    >>> @register("GridWorld-v0", max_episode_steps=100)
    ... class GridWorld(envsdk.Env): ...
    """

    def decorate(target: Callable[..., Any]) -> Callable[..., Any]:
        factory = EnvFactory(target, env_id, max_episode_steps)
        _REGISTRY[env_id] = factory
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=lambda **kwargs: factory(kwargs))
        return target

    return decorate


def registered_ids() -> list[str]:
    """Ids from :func:`register` and from installed packages' entry points (not imported)."""
    return sorted(set(_REGISTRY) | {ep.name for ep in entry_points(group=ENTRY_POINT_GROUP)})


def _entry_point(name: str) -> EnvFactory | None:
    """The env an installed package declares under ``name``, imported now and only this one.

    A CartPole run imports no plugin (the Unity one brings gRPC and OpenCV),
    and a broken plugin is an error only for the runs that name it.
    """
    for ep in entry_points(group=ENTRY_POINT_GROUP, name=name):
        try:
            target = ep.load()
        except Exception as err:
            raise UserError(
                f"env '{name}': its plugin {ep.value} failed to import: {type(err).__name__}: {err}",
                "fix or reinstall the package that provides it (--debug shows the traceback)",
            ) from err
        _REGISTRY[name] = EnvFactory(target, name)
        return _REGISTRY[name]
    return None


def current_version(env_id: str) -> str | None:
    """The newest registered version of a retired gym id (``Pendulum-v0`` -> ``Pendulum-v1``), if any.

    Read from gymnasium's registry, so it stays right as gymnasium moves on.
    """
    match = re.fullmatch(r"(.+)-v(\d+)", env_id)
    if match is None:
        return None
    versions = [
        int(m.group(1))
        for other in gym.registry
        if (m := re.fullmatch(re.escape(match.group(1)) + r"-v(\d+)", other))
    ]
    return f"{match.group(1)}-v{max(versions)}" if versions else None


@dataclass
class ResolvedEnv:
    """An env reference made concrete.

    ``creator`` is None for plain gymnasium ids, which RLlib builds itself
    (that keeps RLlib's fast vectorised path with no wrapper of ours).
    """

    name: str
    creator: EnvFactory | None
    kind: str

    def make(self, env_config: dict | None = None) -> Any:
        if self.creator is not None:
            return self.creator(env_config or {})
        return gym.make(self.name, **(env_config or {}))

    def with_time_limit(self, steps: int) -> ResolvedEnv:
        """This env with episodes cut after ``steps`` (Ray 1.x ``horizon``); named ``<env>@<steps>-steps``."""
        creator = self.creator or EnvFactory(GymMake(self.name), self.name)
        return ResolvedEnv(
            f"{self.name}@{steps}-steps", EnvFactory(creator.target, creator.name, steps), self.kind
        )


@dataclass(frozen=True)
class GymMake:
    """Picklable ``env_config -> gym.make(env_id, **env_config)``."""

    env_id: str

    def __call__(self, env_config: dict) -> Any:
        return gym.make(self.env_id, **env_config)


def resolve_env(spec: Any, search: list[Path] | None = None) -> ResolvedEnv:
    """Resolve a YAML ``env:`` value (see module docstring); ``<env>@<N>-steps`` adds a time limit."""
    if spec is None:
        raise UserError("no env given", "add 'env: CartPole-v1' (or module.Class) to the experiment")
    if not isinstance(spec, str):
        raise UserError(f"env must be a string, got {spec!r}", "write env: module.ClassName")
    limited = re.fullmatch(r"(.+)@(\d+)-steps", spec)
    if limited is not None:
        return resolve_env(limited.group(1), search).with_time_limit(int(limited.group(2)))
    if spec in _REGISTRY:
        return ResolvedEnv(spec, _REGISTRY[spec], "registered")
    plugin = _entry_point(spec)
    if plugin is not None:
        return ResolvedEnv(spec, plugin, "entry point")
    if spec in gym.registry:
        current = current_version(spec)
        if current != spec:  # kept as the file asks (versions differ, e.g. CartPole-v0's 200-step limit)
            notice(f"env '{spec}' is an older version: gymnasium's current one is '{current}'")
            warnings.filterwarnings("ignore", message=rf".*The environment {re.escape(spec)} is out of date")
        return ResolvedEnv(spec, None, "gymnasium")
    current = current_version(spec)
    if current is not None:
        notice(f"env '{spec}' is retired: using '{current}', its current version in gymnasium")
        return ResolvedEnv(current, None, "gymnasium")
    if split_ref(spec) is not None:
        target = import_ref(spec, search or [], what="env")
        if not callable(target):
            raise UserError(f"env '{spec}' is not a class or function", "point env: at an env class")
        # Importing the module may have registered the target (with its step limit).
        registered = next((f for f in _REGISTRY.values() if f.target is target), None)
        if registered is not None:
            return ResolvedEnv(spec, registered, "registered")
        return ResolvedEnv(spec, EnvFactory(target, spec), "import path")
    known = registered_ids() + list(gym.registry)
    hint = closest(spec, known)
    raise UserError(
        f"unknown env '{spec}'",
        f"did you mean {', '.join(hint)}?" if hint else "use a gymnasium id, a registered id or module.Class",
    )
