"""``run: POCA`` in the config's build: what it cannot train with refused before anything starts, then
each trained policy given its learner-only group critic (``<policy>@poca_critic``,
:mod:`envsdk.networks.poca`) of the policy's layer sizes, and the learner its groups."""

from __future__ import annotations

from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from envsdk import substitutions
from envsdk.config.own_keys.behavioral_cloning import KEY as CLONING
from envsdk.config.own_keys.reward_signals import KEY as SIGNALS
from envsdk.config.own_keys.reward_signals import SignalPlan, parse
from envsdk.envs.checker import EnvInfo
from envsdk.errors import UserError
from envsdk.networks.poca import (
    HIDDEN_UNITS,
    NUM_LAYERS,
    GroupCriticModule,
    critic_module_id,
    policy_of_critic,
)
from envsdk.training.build.modules.reward_signals import policy_spaces, recurrent
from envsdk.training.hooks.self_play import opponent_of
from envsdk.training.substitutes.poca.algorithm import POCAConfig
from envsdk.training.substitutes.poca.learner import GROUP_REWARD_FROM_INFOS, GROUPS

RUN = "POCA"


def is_poca(config: Any) -> bool:
    return isinstance(config, POCAConfig)


def check_run(stock: substitutions.Stock, signals: SignalPlan, cloning: dict[str, Any], where: str) -> None:
    """Refuse, in one line each, what POCA does not train with: stock mode (RLlib has no POCA),
    intrinsic reward signals, behavioral cloning."""
    if not stock.on(substitutions.POCA):
        raise UserError(
            f"{where}: run: POCA is envsdk's (RLlib has no MA-POCA), and stock: (or {substitutions.STOCK})"
            " turns it off",
            f"use run: PPO for stock RLlib, or keep the {substitutions.POCA} substitution on",
        )
    plans = [signals.of(p) for p in sorted(set(signals.own or {}))]
    if signals.run is not None:
        plans.append(parse(signals.run, signals.where, signals.run_gamma, base=signals.base))
    intrinsic = sorted({s.name for plan in plans if plan is not None for s in plan.intrinsic})
    if intrinsic:
        raise UserError(
            f"{where}: {SIGNALS} {', '.join(intrinsic)} with run: POCA are not built in this version"
            " (the group critic has one value: the env's reward)",
            f"drop {', '.join(intrinsic)} from {SIGNALS}, or use run: PPO",
        )
    policies = sorted(set(signals.own or {}) | set(signals.gammas or {}))
    other = [
        p or "the run"
        for p, plan in [(None, plans[-1] if signals.run is not None else None)]
        + [(p, signals.of(p)) for p in policies]
        if plan is not None
        and not plan.only_extrinsic_at_one(signals.gamma_of(p) if p else signals.run_gamma)
    ]
    if other:
        raise UserError(
            f"{where}: {SIGNALS} with run: POCA: the env's reward at another strength or gamma than the"
            f" policy's ({', '.join(other)}) is not built in this version (the group critic has one value)",
            f"drop {SIGNALS} (the policy's gamma discounts the group's returns), or use run: PPO",
        )
    if any(cloning.values()):
        raise UserError(
            f"{where}: {CLONING} with run: POCA is not built in this version",
            f"drop {CLONING}, or use run: PPO",
        )


def add_group_critics(config: AlgorithmConfig, info: EnvInfo, env: Any, where: str) -> None:
    """Each trained policy's group critic; the groups and where the group reward is, for the learner."""
    if not info.multi_agent and info.agent_spaces:
        raise UserError(
            f"{where}: run: POCA trains the groups of a multi-agent env; this env has one agent",
            "use run: PPO, or a multi-agent env (env: unity for a Unity game's agents)",
        )
    given = config.rl_module_spec
    specs: dict[str, RLModuleSpec] = (
        dict(given.rl_module_specs or {}) if isinstance(given, MultiRLModuleSpec) else {}
    )
    single = given if isinstance(given, RLModuleSpec) else None
    trained = config.policies_to_train
    frozen = {opponent_of(p) for p in policy_spaces(info, config)}
    hidden = list((config.model_config or {}).get("fcnet_hiddens") or [256, 256])
    for policy, (obs, act) in sorted(policy_spaces(info, config).items()):
        if policy in frozen or (isinstance(trained, (list, set, tuple)) and policy not in trained):
            continue
        if recurrent(config, policy):
            raise UserError(
                f"{where}: run: POCA with a recurrent policy ('{policy}': use_lstm or use_attention) is not"
                " built in this version",
                "drop the policy's memory, or use run: PPO",
            )
        if single is not None and policy not in specs:
            specs[policy] = single
        specs[critic_module_id(policy)] = RLModuleSpec(
            module_class=GroupCriticModule,
            observation_space=obs,
            action_space=act,
            learner_only=True,
            model_config={HIDDEN_UNITS: int(hidden[-1]), NUM_LAYERS: len(hidden)},
        )
    config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=specs))
    # a critic learns at its policy's own learning rate and clip (mlagents-learn: a behavior's own)
    overrides = dict(config.algorithm_config_overrides_per_module or {})
    for critic in [m for m in specs if policy_of_critic(m) is not None]:
        policy = str(policy_of_critic(critic))
        if policy in overrides:
            overrides[critic] = overrides[policy]
    if overrides:
        config.multi_agent(algorithm_config_overrides_per_module=overrides)
    poca: Any = config
    from_infos = poca.group_reward_from_infos
    if from_infos is None:
        from_infos = not getattr(env, "group_reward_in_rewards", False)
    own: dict[str, Any] = {GROUP_REWARD_FROM_INFOS: bool(from_infos)}
    if poca.groups is not None:
        own[GROUPS] = dict(poca.groups)
    config.training(learner_config_dict={**config.learner_config_dict, **own})


def describe_critic(config: AlgorithmConfig, line: str) -> str:
    """A group critic's line of the models' summary in its own words (others pass unchanged)."""
    module_id, _, _ = line.partition(":")
    spec = config.rl_module_spec
    specs = spec.rl_module_specs if isinstance(spec, MultiRLModuleSpec) else {}
    own = specs.get(module_id) if isinstance(specs, dict) else None
    if own is None or own.module_class is not GroupCriticModule:
        return line
    settings: Any = own.model_config or {}
    return (
        f"{module_id}: group critic (POCA): each member's observation read by the default readers,"
        f" attention over the group's members (4 heads), {settings[NUM_LAYERS]} x {settings[HIDDEN_UNITS]}"
        " swish; a value and a baseline per member"
    )
