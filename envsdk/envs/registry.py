"""Finding environments: our registry, entry points, gymnasium ids, import paths.

``env:`` in a YAML file may be

* an id registered with :func:`register` (or through the ``envsdk.envs``
  entry-point group of an installed package),
* a gymnasium id such as ``CartPole-v1``, or one that a package registers when it is
  imported (``ALE/Pong-v5``, ``MiniGrid-Empty-5x5-v0``: :data:`PACKAGE_IDS`), or gymnasium's
  own ``module:id`` form (``ale_py:ALE/Pong-v5``),
* an import path ``module.Class`` or ``module:factory`` (a PettingZoo module or its
  ``env``/``parallel_env`` too), looked up next to the YAML file and in the working directory,
* ``pettingzoo:ID``, an id of PettingZoo's registry (``pettingzoo:classic/tictactoe-v3``).

:func:`resolve_env` turns that string into a :class:`ResolvedEnv` whose
``name`` is what RLlib is given and whose ``make`` builds one instance.  An id that a
package registers is given to RLlib as ``module:id``, so that every env runner imports
the package before gymnasium looks the id up; an env file's own imports travel with its
factory (:attr:`EnvFactory.imports`).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import re
import socket
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import gymnasium as gym

from envsdk.envs import observation_layout, time_limit
from envsdk.envs.adapters import atari
from envsdk.envs.adapters.atari import AtariSettings
from envsdk.envs.adapters.old_gym import LegacyGymAdapter, needs_adapter, share_spaces
from envsdk.envs.adapters.pettingzoo import is_pettingzoo, pettingzoo_target, registry_id, wrap_pettingzoo
from envsdk.envs.imports import (
    import_module,
    import_ref,
    import_user_module,
    imported_with,
    is_user_module,
    split_ref,
)
from envsdk.errors import UserError, closest, did_you_mean
from envsdk.notices import notice

ENTRY_POINT_GROUP = "envsdk.envs"
_REGISTRY: dict[str, EnvFactory] = {}


class EnvFactory:
    """Picklable ``env_config -> env`` creator handed to RLlib.

    Imports :attr:`imports` first (what the env's module imported in the driver: a package
    that registers gymnasium ids on import is not imported by unpickling the env class in a
    remote env runner), passes ``env_config`` to the target as it takes it
    (:func:`config_style`), wraps old-gym-API and PettingZoo envs, applies an episode step
    limit and lays out the observations (:mod:`envsdk.envs.observation_layout`).
    """

    def __init__(
        self,
        target: Callable[..., Any],
        name: str,
        max_episode_steps: int | None = None,
        imports: tuple[str, ...] = (),
        drop_keys: tuple[str, ...] = (),
        atari: AtariSettings | None = None,
    ):
        self.target = target
        self.name = name
        self.max_episode_steps = max_episode_steps
        self.imports = imports
        self.drop_keys = drop_keys
        self.atari = atari

    def __call__(self, env_config: dict | None = None) -> Any:
        for module in self.imports:
            import_for_env(module, self.name)
        settings = dict(env_config or {})
        if self.atari is not None and isinstance(self.target, GymMake):
            settings = {**atari.BASE_SETTINGS, **settings}
            env_config = settings
        style = config_style(self.target, settings)
        if style == "kwargs":
            check_keywords(self.target, settings, self.name)
            env = self.target(**settings)
        else:
            env = (
                self.target(env_config if env_config is not None else {})
                if style == "dict"
                else self.target()
            )
        if is_pettingzoo(env):
            env = wrap_pettingzoo(env)
        elif needs_adapter(env):
            notice(f"env '{self.name}' uses the old gym API (reset -> obs, step -> 4-tuple); adapting it")
            env = LegacyGymAdapter(env)
        share_spaces(env)
        if self.atari is not None:
            env = atari.wrap(env, self.atari)
        if self.max_episode_steps:
            env = time_limit.limit(env, self.max_episode_steps)
        return observation_layout.lay_out(env, self.drop_keys)


CONFIG_PARAMETERS = frozenset(
    {"config", "env_config", "cfg", "conf", "env_ctx", "ctx", "context", "settings"}
)
"""Names of a first parameter that takes ``env_config`` as one dict (the seed tutorials' ``config``)."""


def config_style(target: Callable[..., Any], settings: dict[str, Any] | None = None) -> str:
    """How ``target`` takes ``env_config``: ``dict`` (one positional argument), ``kwargs`` or ``none``.

    One dict where the first parameter is named like a config (``config``, ``env_config``, ...)
    or where the target takes only ``*args``; keywords where every parameter has a default or is
    a ``**kwargs`` (``minigrid.envs.EmptyEnv(size=5)``, PettingZoo's ``env(**kwargs)``, gymnasium
    env classes).  A first parameter that is required and named otherwise takes the dict as
    RLlib passes it, unless a key of ``settings`` names a parameter:
    ``ParametricActionsCartPole(max_avail_actions)`` with ``env_config: {max_avail_actions: 10}``
    gets keywords.
    """
    try:
        params = list(inspect.signature(target).parameters.values())
    except (TypeError, ValueError):
        return "dict"
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    named = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if positional and positional[0].name in CONFIG_PARAMETERS:
        return "dict"
    if positional and positional[0].default is positional[0].empty:
        return "kwargs" if named & set(settings or ()) else "dict"
    if positional or any(p.kind in (p.KEYWORD_ONLY, p.VAR_KEYWORD) for p in params):
        return "kwargs" if not any(p.kind is p.VAR_POSITIONAL for p in params) else "dict"
    return "dict" if any(p.kind is p.VAR_POSITIONAL for p in params) else "none"


def check_keywords(target: Callable[..., Any], settings: dict[str, Any], name: str) -> None:
    """An ``env_config`` key that ``target`` has no parameter for (and no ``**kwargs``), or a
    required parameter that no key names, is a UserError that lists the parameters."""
    params = inspect.signature(target).parameters
    names = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    listed = ", ".join(
        f"{n}" if params[n].default is params[n].empty else f"{n}={params[n].default!r}" for n in names
    )
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        for key in settings:
            if key not in names:
                raise UserError(
                    f"env '{name}' takes no setting '{key}' (env_config is passed as keyword arguments)",
                    did_you_mean(key, names) or f"its settings are: {listed or 'none'}",
                )
    missing = [n for n in names if params[n].default is params[n].empty and n not in settings]
    if missing:
        raise UserError(
            f"env '{name}' needs the setting{'s' if len(missing) > 1 else ''} {', '.join(missing)}"
            " (env_config is passed as keyword arguments)",
            f"add {', '.join(f'{n}: ...' for n in missing)} to env_config; its parameters: {listed}",
        )


def import_for_env(module: str, env_name: str) -> None:
    """Import a module that building ``env_name`` needs, in whichever process builds it (``gym``
    answered by gymnasium where gym is not installed, as in the process that resolved the env)."""
    if module in sys.modules:
        return
    try:
        import_user_module(module)
    except ImportError as err:
        raise UserError(
            f"env '{env_name}' needs the module '{module}', which cannot be imported in this process"
            f" ({socket.gethostname()}, {sys.executable}): {err}",
            f"install the package that provides '{module}' on every node",
        ) from err


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


@dataclass(frozen=True)
class EnvWrappers:
    """Our wrappers around an env that config keys ask for: ``drop_observation_keys`` and
    ``atari_preprocessing``.  Checkpoints record them (:meth:`as_dict`) to rebuild the env."""

    drop_keys: tuple[str, ...] = ()
    atari: AtariSettings | None = None

    def label(self) -> str:
        parts = [f"without-{'-'.join(self.drop_keys)}"] if self.drop_keys else []
        return "+".join([*parts, *(["atari"] if self.atari else [])])

    def as_dict(self) -> dict[str, Any]:
        return {
            "drop_observation_keys": list(self.drop_keys),
            "atari_preprocessing": dataclasses.asdict(self.atari) if self.atari else False,
        }

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> EnvWrappers:
        atari_values = values.get("atari_preprocessing") or None
        return cls(
            tuple(values.get("drop_observation_keys") or ()),
            AtariSettings(**atari_values) if atari_values else None,
        )


@dataclass
class ResolvedEnv:
    """An env reference made concrete.

    ``creator`` is None for gymnasium ids, which RLlib builds itself (that keeps RLlib's
    fast vectorised path with no wrapper of ours); ``name`` is then the id, or ``module:id``
    where a package registers it.
    """

    name: str
    creator: EnvFactory | None
    kind: str
    wrapped_from: tuple[str, EnvWrappers] | None = None  # (the env's own name, our wrappers around it)

    def make(self, env_config: dict | None = None) -> Any:
        if self.creator is not None:  # an empty EnvContext is falsy, and still the one to pass
            return self.creator(env_config if env_config is not None else {})
        return observation_layout.lay_out(gym.make(self.name, **(env_config or {})), ())

    def factory(self) -> EnvFactory:
        """The creator, or one that makes the gymnasium id (for wrappers of ours around it)."""
        return self.creator or EnvFactory(GymMake(self.name), self.name)

    def with_time_limit(self, steps: int) -> ResolvedEnv:
        """This env with episodes cut after ``steps`` (Ray 1.x ``horizon``); named ``<env>@<steps>-steps``."""
        creator = copy.copy(self.factory())
        creator.max_episode_steps = steps
        return ResolvedEnv(f"{self.name}@{steps}-steps", creator, self.kind)

    def wrapped(self, wrappers: EnvWrappers) -> ResolvedEnv:
        """This env inside the wrappers that config keys ask for; the same env where they ask for none."""
        if wrappers == EnvWrappers():
            return self
        creator = copy.copy(self.factory())
        creator.drop_keys, creator.atari = wrappers.drop_keys, wrappers.atari
        return ResolvedEnv(f"{self.name}+{wrappers.label()}", creator, self.kind, (self.name, wrappers))

    def laid_out(self) -> ResolvedEnv:
        """This env made through our factory where RLlib would build it bare: for a gymnasium id
        whose observations need laying out (an ``action_mask`` beside other keys)."""
        return self if self.creator is not None else ResolvedEnv(self.name, self.factory(), self.kind)


@dataclass(frozen=True)
class GymMake:
    """Picklable ``env_config -> gym.make(env_id, **env_config)``."""

    env_id: str

    def __call__(self, env_config: dict) -> Any:
        return gym.make(self.env_id, **env_config)


PACKAGE_IDS: tuple[tuple[str, str, str], ...] = (
    (r"ALE/.+|[A-Z][A-Za-z]+(NoFrameskip|Deterministic)?-v[04]", "ale_py", "ale-py"),
    (r"(MiniGrid|BabyAI)-.+", "minigrid", "minigrid"),
    (
        r"(highway|highway-fast|merge|merge-generic|roundabout|roundabout-generic|parking|parking-parked"
        r"|parking-ActionRepeat|intersection|intersection-multi-agent|racetrack|racetrack-large"
        r"|racetrack-oval|exit|two-way|u-turn|lane-keeping)-v\d+",
        "highway_env",
        "highway-env",
    ),
    (
        r"(Fetch|HandManipulate|HandReach|AdroitHand|AntMaze_|PointMaze_|FrankaKitchen).+",
        "gymnasium_robotics",
        "gymnasium-robotics",
    ),
    (r"dm_control/.+", "shimmy", "shimmy[dm-control]"),
    (r"Panda[A-Z].+", "panda_gym", "panda-gym"),
    (r"FlappyBird-.+", "flappy_bird_gymnasium", "flappy-bird-gymnasium"),
    (r"miniwob/.+", "miniwob", "miniwob"),
)
"""(id pattern, module that registers such ids when imported, the package that installs it).
Gymnasium 1.x loads no plugins by itself: these packages register their ids on import."""


def _module_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _registering_module(env_id: str) -> str | None:
    """The installed module whose import registers ``env_id`` (imported now), if one does.

    The table's module for the id first, then a namespace's own name (``ns/Name-v0`` ->
    ``ns``), then every installed module of the table: ids such as ``Pong-v4`` match no pattern
    of their own.
    """
    namespace = env_id.split("/")[0] if "/" in env_id else None
    tried = [module for pattern, module, _ in PACKAGE_IDS if re.fullmatch(pattern, env_id)]
    if namespace:
        tried += [namespace, namespace.lower(), namespace.lower().replace("-", "_")]
    tried += [module for _, module, _ in PACKAGE_IDS]
    for module in dict.fromkeys(tried):
        if not _module_installed(module):
            continue
        try:
            importlib.import_module(module)
        except Exception as err:
            raise UserError(
                f"env '{env_id}': importing '{module}', which registers it, failed:"
                f" {type(err).__name__}: {err}",
                f"fix or reinstall the package that provides '{module}' (--debug shows the traceback)",
            ) from err
        if env_id in gym.registry:
            return module
    return None


def _missing_package_for(env_id: str) -> str | None:
    """The pip package whose module would register ids like ``env_id`` (:data:`PACKAGE_IDS`), where
    that module is not installed."""
    return next(
        (
            package
            for pattern, module, package in PACKAGE_IDS
            if re.fullmatch(pattern, env_id) and not _module_installed(module)
        ),
        None,
    )


def _gymnasium_form(spec: str, search: list[Path]) -> ResolvedEnv | None:
    """Gymnasium's ``module:id`` (the module registers the id when imported), if ``spec`` is one."""
    module_name, sep, env_id = spec.partition(":")
    if not sep or env_id.isidentifier() or not module_name:
        return None
    if module_name == "pettingzoo":
        return ResolvedEnv(spec, EnvFactory(registry_id(env_id), spec), "pettingzoo")
    module = import_module(module_name, search, "env module", spec)  # as gym.make would import it
    if env_id not in gym.registry:
        raise UserError(
            f"env '{spec}': importing '{module_name}' registered no env '{env_id}'",
            did_you_mean(env_id, list(gym.registry)) or "check the id after the colon",
        )
    if not is_user_module(module):
        return ResolvedEnv(spec, None, "gymnasium")
    # A user's file is shipped to remote runners by value: its top-level register() does not run
    # there, so they get the registered spec itself, entry point and all.
    registered = gym.registry[env_id]
    entry = registered.entry_point
    if isinstance(entry, str):
        entry = import_ref(entry, search, what="entry point")
    target = functools.partial(_make_spec, dataclasses.replace(registered, entry_point=entry))
    return ResolvedEnv(spec, EnvFactory(target, spec, imports=imported_with(module_name)), "gymnasium")


def _make_spec(spec: Any, **kwargs: Any) -> Any:
    return gym.make(spec, **kwargs)


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
    # The forms an id may take, tried in this order (each is given the search path, whether it
    # imports or not); the first that resolves the id wins.
    for form in (_gymnasium_id, _gymnasium_form, _retired_id, _import_path, _package_id):
        resolved = form(spec, search or [])
        if resolved is not None:
            return resolved
    raise _unknown_env(spec)


def _gymnasium_id(spec: str, search: list[Path]) -> ResolvedEnv | None:
    """A gymnasium id registered in this process (kept at the version the file asks for), if ``spec``
    is one."""
    if spec not in gym.registry:
        return None
    current = current_version(spec)
    if current != spec:  # kept as the file asks (versions differ, e.g. CartPole-v0's 200-step limit)
        notice(f"env '{spec}' is an older version: gymnasium's current one is '{current}'")
        warnings.filterwarnings("ignore", message=rf".*The environment {re.escape(spec)} is out of date")
    module = _module_of(spec)
    return ResolvedEnv(f"{module}:{spec}" if module else spec, None, "gymnasium")


def _retired_id(spec: str, search: list[Path]) -> ResolvedEnv | None:
    """The current version of a retired gymnasium id, found before importing packages
    (``Pendulum-v0`` needs none of them)."""
    current = current_version(spec)
    if current is None:
        return None
    notice(f"env '{spec}' is retired: using '{current}', its current version in gymnasium")
    return ResolvedEnv(current, None, "gymnasium")


def _import_path(spec: str, search: list[Path]) -> ResolvedEnv | None:
    """``module.Class`` or ``module:Class`` (or a function, or a PettingZoo module), imported, if
    ``spec`` is one."""
    parts = split_ref(spec) if "/" not in spec else None
    if parts is None:
        return None
    target = pettingzoo_target(import_ref(spec, search, what="env"), spec)
    if not callable(target):
        raise UserError(
            f"env '{spec}' is a {type(target).__name__}, not an env class or function",
            "point env: at an env class, a function that returns an env, or a PettingZoo module",
        )
    # Importing the module may have registered the target (with its step limit).
    registered = next((f for f in _REGISTRY.values() if f.target is target), None)
    if registered is not None:
        return ResolvedEnv(spec, registered, "registered")
    return ResolvedEnv(spec, EnvFactory(target, spec, imports=imported_with(parts[0])), "import path")


def _package_id(spec: str, search: list[Path]) -> ResolvedEnv | None:
    """An id that an installed package registers when imported (``module:id``), if ``spec`` is one."""
    module = _registering_module(spec)
    return None if module is None else ResolvedEnv(f"{module}:{spec}", None, "gymnasium")


def _unknown_env(spec: str) -> UserError:
    """The error for an env nothing resolves: the package that would register it, or the closest ids."""
    package = _missing_package_for(spec)
    if package is not None:
        return UserError(
            f"unknown env '{spec}': ids like it are registered by the package {package},"
            " which is not installed",
            f"pip install {package} (or: pip install 'envsdk[ecosystem]')",
        )
    known = registered_ids() + list(gym.registry)
    hint = closest(spec, known)
    return UserError(
        f"unknown env '{spec}'",
        f"did you mean {', '.join(hint)}?"
        if hint
        else "use a gymnasium id (module:id for one a package registers), a registered id or module.Class",
    )


def _module_of(env_id: str) -> str | None:
    """The installed module (outside gymnasium) whose import registered ``env_id`` in this process:
    env runners must import it too before gymnasium can find the id."""
    entry = gym.registry[env_id].entry_point
    where = entry if isinstance(entry, str) else getattr(entry, "__module__", "") or ""
    root = where.split(":")[0].split(".")[0]
    if not root or root in ("gymnasium", "envsdk") or root not in sys.modules:
        return None
    return None if is_user_module(sys.modules[root]) else root
