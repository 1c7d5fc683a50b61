"""``environment_parameters`` and ``policy_max_steps`` in a build: read, sent to the env, hooked.

:func:`take` reads both keys (``stage_values``); :func:`with_parameters` makes the env take them
(``stage_env``): a Unity game through env_config ``env_parameters``, which its launch sends (the
game draws samplers itself), an env of the user's through a wrapper that calls its ``set_task``
at each reset (:class:`envsdk.envs.curriculum.DrawingFactory`); :func:`install` adds the hooks
that advance the lessons (:mod:`envsdk.training.hooks.lessons`, ``stage_hooks``).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from envsdk.config.own_keys.environment_parameters import KEY as KEY
from envsdk.config.own_keys.environment_parameters import (
    MAX_STEPS_KEY,
    PROGRESS,
    EnvironmentParameters,
    parse,
)
from envsdk.config.yamlio import LineDict
from envsdk.envs.base import TaskSettable
from envsdk.envs.curriculum import DrawingFactory
from envsdk.envs.registry import ResolvedEnv
from envsdk.errors import UserError, closest
from envsdk.notices import notice
from envsdk.training.hooks.callbacks import add_callback
from envsdk.training.hooks.lessons import SINGLE_AGENT_POLICY, LessonSetup, advance, restored

UNITY_PARAMETERS = "env_parameters"  # the Unity env_config key its launch sends


def take(values: LineDict) -> EnvironmentParameters | None:
    """Both keys popped and checked (None: neither given)."""
    if KEY not in values and MAX_STEPS_KEY not in values:
        return None
    seed = values.get("seed")
    return parse(
        values.pop(KEY, None),
        values.where(KEY),
        values.pop(MAX_STEPS_KEY, None),
        values.where(MAX_STEPS_KEY),
        run_seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else 0,
    )


def is_unity(target: Any) -> bool:
    from envsdk.envs.unity.rllib_env import UnityEnv, UnityGymEnv  # here: a gym run imports no gRPC

    return isinstance(target, type) and issubclass(target, UnityEnv | UnityGymEnv)


def with_parameters(
    parameters: EnvironmentParameters | None,
    resolved: ResolvedEnv,
    target: Any,
    env_config: dict[str, Any],
    where: str,
) -> tuple[ResolvedEnv, dict[str, Any]]:
    """The env (and env_config) that take the first lessons' values."""
    if parameters is None or not parameters.parameters:
        return resolved, env_config
    values = parameters.values_at({})
    if is_unity(target):
        given = dict(env_config.get(UNITY_PARAMETERS) or {})
        both = sorted(set(given) & set(values))
        if both:
            raise UserError(
                f"{where}: '{both[0]}' is in both environment_parameters and env_config.env_parameters",
                "give it in one of them",
            )
        from unity_bridge.samplers import Sampler

        sent = {name: v.to_yaml() if isinstance(v, Sampler) else v for name, v in values.items()}
        return resolved, {**env_config, UNITY_PARAMETERS: {**given, **sent}}
    if isinstance(target, type) and not issubclass(target, TaskSettable):
        raise UserError(
            f"{where}: environment_parameters need an env with set_task, and {target.__name__} has none",
            "subclass envsdk.TaskSettable (or envsdk.CurriculumEnv) and implement set_task(dict)",
        )
    factory = DrawingFactory(resolved.factory(), values)
    return ResolvedEnv(
        f"{resolved.name}+environment-parameters", factory, resolved.kind, resolved.wrapped_from
    ), env_config


def policies_of(
    parameters: EnvironmentParameters, config: AlgorithmConfig, target: Any, where: str
) -> dict[str, str]:
    """Behavior -> policy id for each behavior the criteria name; a missing one is a UserError."""
    behaviors = parameters.behaviors()
    if not config.is_multi_agent:
        return dict.fromkeys(behaviors, SINGLE_AGENT_POLICY)
    known = set(config.policies or ())
    mapping = None
    if is_unity(target):
        from envsdk.envs.unity.rllib_env import PolicyMapping

        mapping = PolicyMapping(dict(config.env_config.get("policy_mapping") or {}))
    out = {}
    for behavior in behaviors:
        policy = mapping.policy_for(behavior) if mapping is not None else behavior
        if policy not in known:
            raise UserError(
                f"{where}: completion_criteria behavior '{behavior}' is no policy of this run"
                + (f" (its policy would be '{policy}')" if policy != behavior else ""),
                f"name one of the policies: {', '.join(sorted(map(str, known)))}",
            )
        out[behavior] = policy
    return out


def _known_policies_only(
    parameters: EnvironmentParameters, config: AlgorithmConfig, where: str
) -> EnvironmentParameters:
    """``policy_max_steps`` of the run's policies: a name close to one of them is a typo (refused); one
    that is not is a behavior the game lacks, left out with a notice, as mlagents-learn reads only the
    settings of the behaviors its game has."""
    if not config.is_multi_agent:  # one policy; or a dry run that did not ask a multi-agent env for its own
        return parameters
    known = set(map(str, config.policies or ()))
    unknown = sorted(set(parameters.policy_max_steps) - known)
    for name in unknown:
        near = closest(name, known, n=1)
        if near:
            raise UserError(
                f"{where}: policy_max_steps names '{name}', which is no policy of this run",
                f"did you mean '{near[0]}'?",
            )
    if not unknown:
        return parameters
    kept = {p: n for p, n in parameters.policy_max_steps.items() if p in known}
    if parameters.policy_max_steps and not kept:
        raise UserError(
            f"{where}: policy_max_steps names no policy of this run ({', '.join(unknown)})",
            f"name the run's policies: {', '.join(sorted(known))}",
        )
    notice(
        f"policy_max_steps: {', '.join(unknown)}: no such policy in this run (the game has no such"
        " behavior), left out"
    )
    return dataclasses.replace(parameters, policy_max_steps=kept)


def install(
    config: AlgorithmConfig,
    parameters: EnvironmentParameters | None,
    target: Any,
    where: str,
    window: Any = None,
) -> None:
    """The hooks that advance the lessons and report progress, on ``config``."""
    if parameters is None:
        return
    if not config.enable_rl_module_and_learner:
        raise UserError(
            f"{where}: environment_parameters need the new API stack; a ModelV2 custom_model runs on the old",
            "use an RLModule plugin, or leave environment_parameters out",
        )
    from envsdk.envs.unity.rllib_env import UnityEnv

    if isinstance(target, type) and issubclass(target, UnityEnv) and not config.is_multi_agent:
        return  # a dry run that did not launch the game: its policies are unknown, and nothing trains
    parameters = _known_policies_only(parameters, config, where)
    policies = policies_of(parameters, config, target, where)
    for parameter in parameters.parameters:
        for lesson in parameter.lessons:
            criteria = lesson.criteria
            if criteria is None or criteria.measure != PROGRESS:
                continue
            policy = policies[criteria.behavior]
            if policy not in parameters.policy_max_steps:
                raise UserError(
                    f"{where}: lesson '{lesson.name}' of {parameter.name} is measured by progress, and"
                    f" policy '{policy}' has no policy_max_steps",
                    f"add policy_max_steps: {{{policy}: 500000}} (mlagents-learn's max_steps)",
                )
    setup = LessonSetup(parameters, policies, config.is_multi_agent, is_unity(target), window)
    add_callback(config, "on_train_result", functools.partial(advance, setup=setup))
    add_callback(config, "on_checkpoint_loaded", functools.partial(restored, setup=setup))
