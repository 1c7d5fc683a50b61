"""``reward_signals:`` and ``behavioral_cloning:`` in the config: checked against the run before
anything starts, then each policy with signals given a learner-only ``<policy>@reward_signals``
module (:mod:`envsdk.networks.reward_signals`) in the MultiRLModule and, with PPO, a value head per
signal; each cloning policy its settings in its learner config, its demonstrations checked against
its spaces.  The learners that use them: :mod:`envsdk.training.substitutes.reward_signals`."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner as RLlibPPOTorchLearner
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from envsdk import substitutions
from envsdk.config.own_keys.behavioral_cloning import KEY as CLONING
from envsdk.config.own_keys.behavioral_cloning import Cloning
from envsdk.config.own_keys.behavioral_cloning import of as cloning_of
from envsdk.config.own_keys.reward_signals import KEY, RewardSignals, SignalPlan
from envsdk.envs.checker import EnvInfo
from envsdk.errors import UserError
from envsdk.networks.catalogs import VALUE_HEADS, AnySpacePPOCatalog
from envsdk.networks.reward_signals import (
    SIGNALS,
    RewardSignalsModule,
    demo_shapes,
    signals_module_id,
)
from envsdk.training.build.models import ModelSettings
from envsdk.training.build.multi_agent import policy_of
from envsdk.training.hooks.self_play import opponent_of
from envsdk.training.substitutes.reward_signals import LEARNER_KEY, SIGNAL_LEARNERS

CLONING_LEARNERS: dict[type, tuple[str, str]] = {RLlibPPOTorchLearner: SIGNAL_LEARNERS[RLlibPPOTorchLearner]}


def check_run(
    key: str, run: str, default_config: AlgorithmConfig, stock: substitutions.Stock, where: str
) -> str:
    """Refuse, with one line, what cannot train with reward signals or cloning (``key``): an
    algorithm whose learner does not take it, RLlib's own learner (stock mode).  Returns the
    algorithm whose learner takes it."""
    learners = SIGNAL_LEARNERS if key == KEY else CLONING_LEARNERS
    names = [name for name, _ in learners.values()]
    found = learners.get(default_config.learner_class)
    if found is None:
        takers = f"{names[0]}'s learner" if len(names) == 1 else f"the learners of {', '.join(names)}"
        raise UserError(
            f"{where}: {key} trains with {takers} in this version; this run is {run}",
            f"use run: {' or '.join(names)}, or drop {key}",
        )
    name, substitution = found
    if not stock.on(substitution):
        raise UserError(
            f"{where}: {key} is computed by envsdk's {name} learner, which stock: (or {substitutions.STOCK})"
            " turns off",
            f"drop {key}, or keep the {substitution} substitution on",
        )
    return name


def add_cloning(
    config: AlgorithmConfig, plan: Mapping[str, Cloning | None], info: EnvInfo, where: str
) -> None:
    """Each cloning policy's settings into its learner config (``algorithm_config_overrides_per_module``),
    its demonstrations checked against its spaces first."""
    overrides = dict(config.algorithm_config_overrides_per_module or {})
    for policy, (obs, act) in sorted(policy_spaces(info, config).items()):
        settings = cloning_of(plan, policy)
        if settings is None:
            continue
        if recurrent(config, policy):
            raise UserError(
                f"{where}: {CLONING} with a recurrent policy ('{policy}': use_lstm or use_attention) is"
                " not built: cloning feeds single steps",
                f"drop {CLONING} or the policy's memory",
            )
        _check_demo(settings.demo_path, obs, act, f"{where}: {CLONING}.demo_path (policy '{policy}')")
        own = dict(overrides.get(policy, {}))
        learner_config = {**config.learner_config_dict, **own.get("learner_config_dict", {})}
        own["learner_config_dict"] = {**learner_config, CLONING: settings.to_config()}
        overrides[policy] = own
    if overrides:
        config.multi_agent(algorithm_config_overrides_per_module=overrides)


def policy_spaces(info: EnvInfo, config: AlgorithmConfig) -> dict[str, tuple[gym.Space, gym.Space]]:
    """Policy id -> its spaces: a policy spec's own, else those of the agents the mapping gives it
    (empty in a dry run that did not start the env)."""
    found = {
        str(pid): (spec.observation_space, spec.action_space)
        for pid, spec in (config.policies or {}).items()
        if getattr(spec, "observation_space", None) is not None
        and getattr(spec, "action_space", None) is not None
    }
    for agent, policy in policy_of(config, info).items():
        if agent in info.agent_spaces:
            found.setdefault(str(policy), info.agent_spaces[agent])
    return found


def add_signal_modules(
    config: AlgorithmConfig, plan: SignalPlan, model: ModelSettings, info: EnvInfo, where: str
) -> None:
    """Each policy with signals: its signals module; with PPO value heads, else learner_config_dict."""
    if not plan.given:
        return
    heads = issubclass(config.learner_class, RLlibPPOTorchLearner)
    if model.old_stack or (heads and model.plugin):
        raise UserError(
            f"{where}: {KEY} need the default model's value heads (one per signal); this run's model is"
            f" {model.plugin or 'a ModelV2 custom_model'}",
            f"drop custom_model, or drop {KEY}",
        )
    given = config.rl_module_spec
    specs: dict[str, RLModuleSpec] = (
        dict(given.rl_module_specs or {}) if isinstance(given, MultiRLModuleSpec) else {}
    )
    single = given if isinstance(given, RLModuleSpec) else None
    headed, summed = [], {}
    for policy, (obs, act) in sorted(policy_spaces(info, config).items()):
        signals = plan.of(policy)
        if signals is None or signals.only_extrinsic_at_one(plan.gamma_of(policy)):
            if single is not None and policy not in specs:  # a policy without signals: the run's module
                specs[policy] = _spec_for(single, obs, act, {})
            continue
        own = {VALUE_HEADS: signals.names, SIGNALS: signals.to_config()} if heads else {}
        headed.append(policy)
        summed[policy] = signals.to_config()
        for module_id in (policy, opponent_of(policy)):  # self-play's frozen copy takes the weights
            base = specs.get(module_id, single if module_id == policy else None)
            if base is not None:
                specs[module_id] = _spec_for(base, obs, act, {**config.model_config, **own} if heads else {})
                if heads:
                    specs[module_id].catalog_class = AnySpacePPOCatalog  # the value heads
        if signals.intrinsic:
            specs[signals_module_id(policy)] = _signals_spec(signals, obs, act, policy, where)
    if not headed:  # only the env's reward at strength 1 (or no env known yet): RLlib's as it is
        return
    config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
    if not heads:
        config.training(learner_config_dict={**config.learner_config_dict, LEARNER_KEY: summed})


def recurrent(config: AlgorithmConfig, policy: str) -> bool:
    """Whether the policy's module keeps a memory (the run's model_config, or its own spec's)."""
    given = config.rl_module_spec
    spec = (given.rl_module_specs or {}).get(policy) if isinstance(given, MultiRLModuleSpec) else given
    own: Any = getattr(spec, "model_config", None) or {}
    if dataclasses.is_dataclass(own) and not isinstance(own, type):
        own = dataclasses.asdict(own)
    merged = {**(config.model_config or {}), **dict(own)}
    return bool(merged.get("use_lstm") or merged.get("use_attention"))


def _signals_spec(
    signals: RewardSignals, obs: gym.Space, act: gym.Space, policy: str, where: str
) -> RLModuleSpec:
    """The learner-only module of a policy's intrinsic signals; a demonstration checked first."""
    for signal in signals.intrinsic:
        if signal.demo_path is not None:
            _check_demo(
                signal.demo_path,
                obs,
                act,
                f"{where}: {KEY}.gail.demo_path {signal.demo_path} (policy '{policy}')",
            )
    return RLModuleSpec(
        module_class=RewardSignalsModule,
        observation_space=obs,
        action_space=act,
        learner_only=True,
        model_config={SIGNALS: signals.to_config()},
    )


def _spec_for(base: RLModuleSpec, obs: gym.Space, act: gym.Space, settings: dict[str, Any]) -> RLModuleSpec:
    """A copy of ``base`` for these spaces, ``settings`` over its model_config."""
    one = copy.deepcopy(base)
    one.observation_space, one.action_space = obs, act
    if settings:
        given: Any = one.model_config or {}
        if dataclasses.is_dataclass(given) and not isinstance(given, type):
            given = dataclasses.asdict(given)
        one.model_config = {**given, **settings}
    return one


def _check_demo(path: str, obs: gym.Space, act: gym.Space, source: str) -> None:
    """``gail.demo_path`` read and checked against the policy's spaces: one line naming the file and
    what does not fit (unity_bridge's DemoFileError, a user's mistake)."""
    from unity_bridge.demo_files import DemoFileError, check_demo, read_demo  # protobuf: where one imitates

    shapes, continuous, branches = demo_shapes(obs, act)
    try:
        check_demo(read_demo(path), shapes, continuous, branches, source)
    except DemoFileError as err:  # a ValueError, which the config's build would read as RLlib's refusal
        raise UserError(err.message, err.hint) from err
