"""The run's envs: training's and evaluation's, resolved, registered and their settings prepared.

``evaluation_config`` may name its own ``env`` and ``env_config``; RLlib merges the latter over
training's.  Both go through the same resolution (registered names, import paths, old-gym-API
classes, ``unity``) and the same ``prepare_env_config`` hooks as training's, each value of a grid
inside them too, and an evaluation env must fit the trained networks.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym

from envsdk.config.yamlio import LineDict, merge
from envsdk.envs.checker import AGENT, EnvInfo
from envsdk.envs.observation_layout import MultiAgentLayout, SingleAgentLayout
from envsdk.envs.registry import ResolvedEnv, resolve_env
from envsdk.envs.spaces import describe_space
from envsdk.errors import UserError
from envsdk.training.hooks.callbacks import hook_list


def register(resolved: ResolvedEnv) -> None:
    """Make the env's name known to RLlib's env runners (plain gymnasium ids need nothing)."""
    if resolved.creator is not None:
        from ray.tune.registry import register_env

        register_env(resolved.name, resolved.creator)


def needs_layout(env: Any, resolved: ResolvedEnv) -> bool:
    """Whether the env that ``resolved.make`` built was laid out (:mod:`envsdk.envs.observation_layout`) where
    RLlib, building a gymnasium id itself, would not lay it out."""
    return resolved.creator is None and isinstance(env, SingleAgentLayout | MultiAgentLayout)


def target(resolved: ResolvedEnv) -> Any:
    """The env class (or factory) behind ``resolved``; None for a plain gymnasium id."""
    return resolved.creator.target if resolved.creator is not None else None


def evaluation_env(values: LineDict, paths: list[Path], horizon: int | None) -> ResolvedEnv | None:
    """``evaluation_config.env`` resolved and registered as ``env`` is (registered names, import
    paths, Ray 1.x ids, ``unity``), with the same ``horizon``; None where evaluation uses training's."""
    evaluation = values.get("evaluation_config") or {}
    if evaluation.get("env") is None:
        return None
    try:
        resolved = resolve_env(evaluation["env"], paths)
    except UserError as err:
        raise UserError(
            f"{values.where('evaluation_config')}: evaluation_config.env: {err.message}", err.hint
        ) from err
    if horizon is not None:
        resolved = resolved.with_time_limit(horizon)
    register(resolved)
    evaluation["env"] = resolved.name
    return resolved


def same_layout(a: gym.Space, b: gym.Space) -> bool:
    """Whether a network built for ``a`` takes ``b``: equal spaces, or Boxes of one shape and dtype."""
    if isinstance(a, gym.spaces.Box) and isinstance(b, gym.spaces.Box):
        return a.shape == b.shape and a.dtype == b.dtype
    if isinstance(a, gym.spaces.Dict) and isinstance(b, gym.spaces.Dict):
        return list(a.spaces) == list(b.spaces) and all(same_layout(a[k], b[k]) for k in a.spaces)
    if isinstance(a, gym.spaces.Tuple) and isinstance(b, gym.spaces.Tuple):
        return len(a.spaces) == len(b.spaces) and all(map(same_layout, a.spaces, b.spaces))
    return bool(a == b)


def check_evaluation_spaces(training: EnvInfo, evaluation: EnvInfo, where: str, name: str) -> None:
    """Evaluation's env runs the trained networks: each agent both envs have must fit its policy's."""
    if training.multi_agent != evaluation.multi_agent:
        kinds = {True: "multi-agent", False: "single-agent"}
        raise UserError(
            f"{where}: evaluation_config.env '{name}' is {kinds[evaluation.multi_agent]},"
            f" but training's env is {kinds[training.multi_agent]}",
            "evaluate on an env of the same kind, or remove evaluation_config.env",
        )
    for agent in [a for a in evaluation.agent_spaces if a in training.agent_spaces]:
        for what, trained, seen in zip(
            ("observations", "actions"),
            training.agent_spaces[agent],
            evaluation.agent_spaces[agent],
            strict=True,
        ):
            if not same_layout(trained, seen):
                who = "" if agent == AGENT else f", agent '{agent}',"
                short = describe_space(seen) != describe_space(trained)  # else the full text tells them apart
                given, takes = (describe_space(seen), describe_space(trained)) if short else (seen, trained)
                raise UserError(
                    f"{where}: evaluation_config.env '{name}'{who} has {what} {given}, but the trained"
                    f" network's are {takes}",
                    "evaluate on an env with training's spaces, or remove evaluation_config.env",
                )


def evaluation_own_hooks(config: Any, training: Any, evaluation: Any, given: dict[str, Any]) -> None:
    """An ``evaluation_config.env`` other than training's gets its own env hooks, in ``evaluation_config``
    (what RLlib's evaluation env runners are built from): its ``config_defaults`` where evaluation's
    settings (``given``) do not say, its ``env_callbacks`` in place of training's env's, and per-agent
    metrics dropped or kept by its ``stable_agent_ids``."""
    from envsdk.training.hooks.agent_metrics import drop_per_agent_metrics

    settings = dict(config.evaluation_config or {})
    for key, value in evaluation.config_defaults.items():
        if key not in given:
            settings.setdefault(key, value)
    events = set(training.env_callbacks) | set(evaluation.env_callbacks) | {"on_sample_end"}
    for event in sorted(events):
        before = hook_list(getattr(config, f"callbacks_{event}", None))
        hooks = [
            h
            for h in before
            if h is not training.env_callbacks.get(event) and h is not drop_per_agent_metrics
        ]
        if event in evaluation.env_callbacks:
            hooks.append(evaluation.env_callbacks[event])
        if event == "on_sample_end" and not evaluation.stable_agent_ids:
            hooks.append(drop_per_agent_metrics)
        if hooks != before:
            settings[f"callbacks_{event}"] = hooks
    config.evaluation(evaluation_config=settings)


ENV_CONFIGS = (("env_config",), ("evaluation_config", "env_config"))
"""Where an env's settings sit in the config: training's, and evaluation's (merged over it by RLlib)."""


def env_config_head(path: tuple) -> tuple | None:
    """The :data:`ENV_CONFIGS` entry that ``path`` lies in, if any."""
    return next((head for head in ENV_CONFIGS if path[: len(head)] == head), None)


def prepare_env_configs(
    prepare: Callable[[dict[str, Any], Path], dict[str, Any]],
    prepare_evaluation: Callable[[dict[str, Any], Path], dict[str, Any]],
    values: dict[str, Any],
    env_config: dict[str, Any],
    search: dict[tuple, Any],
    base_dir: Path,
) -> dict[str, Any]:
    """``env_config``, ``evaluation_config.env_config`` and each value of a grid inside them
    through their env's ``prepare_env_config`` (``prepare_evaluation``: evaluation's env's, which is
    training's unless ``evaluation_config.env`` names another); returns the prepared ``env_config``.

    Evaluation's settings are prepared merged over training's, key by key at any depth as RLlib
    merges them, and keep only their own (top-level) keys.  Without this, evaluation's env and
    every trial but the representative's would get their values as written (a Unity player's path
    relative to the YAML), and a bad value would only fail in those env runners.
    """
    evaluation = values.get("evaluation_config") or {}
    own = evaluation.get("env_config") or {}

    def prepared(head: tuple, settings: dict[str, Any]) -> dict[str, Any]:
        if head == ("env_config",):
            return prepare(settings, base_dir)
        merged = prepare_evaluation(merge(env_config, settings), base_dir)
        return {key: merged[key] for key in settings if key in merged}

    for path in [p for p in search if env_config_head(p)]:
        head = env_config_head(path)
        assert head is not None
        inner = path[len(head) :]
        grid = []
        for value in search[path]["grid_search"]:
            trial = copy.deepcopy(env_config if head == ("env_config",) else own)
            node = trial
            for part in inner[:-1]:
                node = node[part]
            node[inner[-1]] = value
            out: Any = prepared(head, trial)
            for part in inner:
                out = out[part]
            grid.append(out)
        search[path] = {"grid_search": grid}
    if own:
        evaluation["env_config"] = prepared(ENV_CONFIGS[1], own)
    return prepared(ENV_CONFIGS[0], env_config)
