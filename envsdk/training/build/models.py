"""Each policy's network: a plugin (``custom_model``) or the default model, and its ``model_config``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec

from envsdk.config import legacy
from envsdk.config.validation import (
    check_model_config_value,
)
from envsdk.config.yamlio import where_of
from envsdk.envs.checker import AGENT, EnvInfo
from envsdk.errors import UserError, did_you_mean
from envsdk.networks.catalogs import Q_NETWORK
from envsdk.networks.choice import module_spec
from envsdk.networks.plugins import load_model
from envsdk.notices import notice
from envsdk.training.build.translate import search_candidates

MODEL_CONFIG_FIELDS = {f.name for f in dataclasses.fields(DefaultModelConfig)}


@dataclass
class ModelSettings:
    """Where the YAML's ``model``/``model_config`` ended up."""

    old_stack_model: dict[str, Any] = field(default_factory=dict)  # ModelV2 path
    module_spec: RLModuleSpec | None = None  # an RLModule plugin, or the default module for these spaces
    model_config: dict[str, Any] = field(default_factory=dict)  # new-stack module settings
    plugin: str | None = None  # "custom RLModule NAME (path)" for plugins

    @property
    def old_stack(self) -> bool:
        return bool(self.old_stack_model.get("custom_model"))


def _policy_spaces(info: EnvInfo) -> dict[str, tuple[gym.Space, gym.Space]]:
    """Spaces to pick the default model for, named for error messages."""
    if info.policies:
        return {f"policy '{pid}'": spaces for pid, spaces in info.policies.items()}
    if not info.multi_agent:  # (nothing known yet in a dry run that does not start the env)
        return {"the env": info.agent_spaces[AGENT]} if AGENT in info.agent_spaces else {}
    return {f"agent '{aid}'": spaces for aid, spaces in info.agent_spaces.items()}


def _check_model_config_keys(model_config: dict[str, Any], defaults: AlgorithmConfig, where: str) -> None:
    """A default model's ``model_config`` key that nothing reads: exit 2 for a near miss of a known
    key (a typo would otherwise train with the default), a notice for any other.  ``defaults``: the
    algorithm's default config, whose ``model_config`` holds the keys it adds itself (``twin_q``)."""
    known = MODEL_CONFIG_FIELDS | {Q_NETWORK} | set(defaults.model_config)
    for key in sorted(set(model_config) - known):
        hint = did_you_mean(key, known)
        if hint:
            raise UserError(f"{where}: unknown model_config key '{key}'", hint)
        notice(f"model_config key '{key}' is not one of RLlib's default model's; it is passed on as given")


def model_settings(
    values: dict[str, Any],
    info: EnvInfo,
    defaults: AlgorithmConfig,
    run: str,
    paths: list[Path],
    where: str,
    search: dict[tuple, Any],
) -> ModelSettings:
    """Route ``model``/``model_config`` to the ModelV2 dict, an RLModule plugin or the default module.

    ``defaults``: the algorithm's default config.  ``search``: the experiment's search spaces, whose
    candidates for the default model's keys are checked.
    """
    given_model, given_model_config = values.pop("model", None) or {}, values.pop("model_config", None) or {}
    model, model_config = dict(given_model), dict(given_model_config)
    name = model.pop("custom_model", None)
    options = dict(model.pop("custom_model_config", None) or {})
    if name:
        plugin = load_model(str(name), paths)
        plugin.check_options(options)
        if plugin.is_modelv2:
            from ray.rllib.models import ModelCatalog

            # RLlib passes custom_model_config entries to the constructor as kwargs.
            ModelCatalog.register_custom_model(plugin.catalog_name, plugin.cls)
            return ModelSettings(
                {**model, "custom_model": plugin.catalog_name, "custom_model_config": options}
            )
        _check_value_function(plugin.cls, plugin.name, run)
        for path in [p for p in search if p[:2] == ("model", "custom_model_config") and len(p) > 2]:
            search[("model_config", *path[2:])] = search.pop(path)  # the plugin's options are model_config
        # model: beside custom_model (use_lstm, fcnet_hiddens, ...) is the module's model_config too,
        # where check_modules finds a use_lstm the module does not read
        translated, _ = legacy.translate_model_options(given_model, where)
        if translated:
            notice(f"model options {sorted(translated)} go to model_config on the new API stack")
        # RLlib's learner connectors read max_seq_len for a stateful module, with no default there
        return ModelSettings(
            module_spec=RLModuleSpec(module_class=plugin.cls),
            model_config={
                "max_seq_len": DefaultModelConfig.max_seq_len,
                **translated,
                **model_config,
                **options,
            },
            plugin=f"custom RLModule {plugin.name} ({plugin.path})",
        )
    translated, origin = legacy.translate_model_options(given_model, where)
    unknown = [k for k in translated if k not in MODEL_CONFIG_FIELDS]
    if unknown:
        raise UserError(
            f"{where_of(translated, unknown[0], where)}: unknown model option '{unknown[0]}'",
            did_you_mean(unknown[0], MODEL_CONFIG_FIELDS) or "see RLlib's DefaultModelConfig",
        )
    _move_model_search(search, origin, given_model_config)
    if translated:
        notice(f"model options {sorted(translated)} go to model_config on the new API stack")
        model_config = {**translated, **model_config}
    _check_model_config_keys(model_config, defaults, where)
    for key in sorted(set(model_config) & MODEL_CONFIG_FIELDS):
        here = where_of(given_model_config if key in given_model_config else translated, key, where)
        searched = search.get(("model_config", key))
        for candidate in search_candidates(searched) if searched is not None else []:
            check_model_config_value(key, candidate, here)
        model_config[key] = check_model_config_value(key, model_config[key], here)
    if model_config.get("use_lstm"):  # RLlib's learners read it from the config, with no default there
        model_config.setdefault("max_seq_len", DefaultModelConfig.max_seq_len)
    spec = module_spec(run, defaults, _policy_spaces(info), model_config)
    return ModelSettings(module_spec=spec, model_config=model_config)


CRITIC_ALGORITHMS = ("PPO", "APPO", "IMPALA")  # their learners read the module's value predictions


def _check_value_function(module_class: type, name: str, run: str) -> None:
    """PPO, APPO and IMPALA learn from the module's value function: a custom RLModule without one
    fails in RLlib's first update (a KeyError on the advantages); say it before anything starts."""
    from ray.rllib.core.rl_module.apis import ValueFunctionAPI

    if run.upper() in CRITIC_ALGORITHMS and not issubclass(module_class, ValueFunctionAPI):
        raise UserError(
            f"custom_model '{name}' ({module_class.__name__}) has no value function, which {run} learns from",
            "subclass ray.rllib.core.rl_module.apis.ValueFunctionAPI (compute_values), or use an"
            " algorithm that needs none (e.g. run: DQN, SAC, BC)",
        )


def _move_model_search(search: dict[tuple, Any], origin: dict[str, str], model_config: dict) -> None:
    """Search spaces under ``model:`` go where the new API stack reads them: ``("model", old, ...)``
    to ``("model_config", new, ...)`` for each key ``new`` that ``origin`` says came from ``old``
    (none for a dropped option), unless ``model_config`` sets ``new`` itself.  Left under ``model``,
    Tune would vary the old stack's ``model`` dict, which no new-stack module reads."""
    for path in [p for p in search if p[0] == "model" and len(p) > 1]:
        domain = search.pop(path)
        for new_key in (n for n, o in origin.items() if o == path[1] and n not in model_config):
            search[("model_config", new_key, *path[2:])] = domain
