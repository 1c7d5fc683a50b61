"""Turn an experiment's ``config:`` mapping into an RLlib 2.60 AlgorithmConfig.

Every config key a YAML file may hold is handled in this module:

* Ray 1.x names are translated (:mod:`envsdk.config.legacy`), one notice each;
* any other key must be a 2.60 config key of the chosen algorithm, else a
  UserError names the key, its ``file:line`` and the closest valid names;
* ``{grid_search|choice|uniform|loguniform|randint|...: [...]}`` values
  become Tune search spaces;
* ``env``/``env_config`` pick the environment (:mod:`envsdk.envs.registry`);
* ``model: {custom_model: NAME, custom_model_config: {...}}`` loads a plugin
  (:mod:`envsdk.envs.plugins`); other ``model`` keys become the new stack's
  ``model_config``;
* ``curriculum: module.fn`` installs :func:`envsdk.envs.curriculum.apply_curriculum`;
* ``policies`` (a list of ids), ``policy_mapping_fn`` (an import path) and
  ``policies_to_train`` go to ``config.multi_agent``; the Ray 1.x
  ``multiagent: {...}`` sub-dict is flattened into them;
* ``self_play: {...}`` (:mod:`envsdk.config.self_play`) sets up the opponent
  modules, the mapping and the ELO callbacks (:mod:`envsdk.training.self_play`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.policy.policy import PolicySpec

from envsdk import internals, speedups, substitutions
from envsdk.config import legacy, offline
from envsdk.config.env_checks import EnvCheckSettings
from envsdk.config.experiment import Experiment, record
from envsdk.config.self_play import SelfPlaySettings
from envsdk.config.validation import (
    SEARCH_SPACES,
    check_config_value,
    check_model_config_value,
    search_domain,
)
from envsdk.config.yamlio import LineDict, merge, where_of
from envsdk.envs import atari
from envsdk.envs.atari import AtariSettings
from envsdk.envs.base import hooks
from envsdk.envs.checker import AGENT, EnvInfo, preflight, unbuilt
from envsdk.envs.curriculum import apply_curriculum
from envsdk.envs.default_models.catalogs import Q_NETWORK
from envsdk.envs.default_models.choice import check_modules, module_spec
from envsdk.envs.imports import import_ref
from envsdk.envs.plugins import load_model, plugin_name, search_path
from envsdk.envs.registry import EnvWrappers, ResolvedEnv, resolve_env
from envsdk.errors import UserError, closest, did_you_mean
from envsdk.notices import notice, quiet_rllib
from envsdk.training import (
    agent_metrics,
    batched_runner,
    env_setup,
    episode_window,
    guards,
    observation_filter,
    off_policy,
    reward_normalization,
    self_play,
)
from envsdk.training.callbacks import add_callback
from envsdk.training.sac_learner import CRITIC_LOSS, CRITIC_LOSSES, SACTorchLearner

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm import Algorithm

_MISSING = object()
SCHEDULED = {"lr", "entropy_coeff"}  # where a Ray 1.x *_schedule key replaces the plain value
# Keys handled by this module itself (checked where they are used), not by their RLlib default's type.
NOT_TYPE_CHECKED = {"input", "env", "env_config", "model", "model_config", "curriculum", "callbacks",
                    "policies", "env_checks",
                    "policy_mapping_fn", "policies_to_train", "multiagent", "self_play"}  # fmt: skip
# The form of the keys above that are mappings, lists or import paths, checked (with the keys of a
# `model` or `multiagent` mapping) by _check_shapes before any is used; null means the default.
SHAPES: dict[str, tuple[tuple[Any, ...], str]] = {
    "env_config": ((dict,), "a mapping of the env's settings, e.g. {size: 5}"),
    "model": ((dict,), "a mapping of model options, e.g. {fcnet_hiddens: [64, 64]}"),
    "custom_model_config": ((dict,), "a mapping of the custom model's settings"),
    "model_config": ((dict,), "a mapping of model settings, e.g. {fcnet_hiddens: [64, 64]}"),
    "evaluation_config": ((dict,), "a mapping of config keys for evaluation, e.g. {explore: false}"),
    "multiagent": ((dict,), "a mapping of multi-agent settings, e.g. {policies: [red, blue]}"),
    "policies": ((list, tuple, set, dict), "a list of policy names, e.g. [red, blue]"),
    "policies_to_train": ((list, tuple, set, Callable), "a list of policy names, e.g. [red]"),
    "policy_mapping_fn": ((str, Callable), "an import path, e.g. policies.by_team"),
    "curriculum": ((str, Callable), "an import path, e.g. tasks.curriculum_fn"),
    "input": ((str, list, tuple, dict), "a path or a list of paths of recorded data"),
    "drop_observation_keys": ((list, tuple), "a list of the observation's Dict keys to drop, e.g. [mission]"),
}
# Keys this tool adds on top of RLlib's, or accepts in their Python-API spelling.
EXTRA_KEYS = {
    "curriculum",
    "model_config",
    "lambda_",
    "env",
    "env_config",
    "multiagent",
    "horizon",
    "self_play",
    "normalize_rewards",
    "drop_observation_keys",
    "atari_preprocessing",
    "env_checks",
    "sampler",
    "critic_loss",
    substitutions.KEY,
}
MODEL_CONFIG_FIELDS = {f.name for f in dataclasses.fields(DefaultModelConfig)}
MULTI_AGENT_KEYS = ("policies", "policy_mapping_fn", "policies_to_train", "count_steps_by")


def algorithm_class(run: str) -> type[Algorithm]:
    from ray.rllib.algorithms.registry import ALGORITHMS

    removed = legacy.removed_algorithm(run)
    if removed is not None and run not in ALGORITHMS:
        nearest = (
            f"the nearest is {removed.algorithm}" if removed.algorithm else "none of its algorithms is close"
        )
        rerun = f": write 'run: {removed.algorithm}', or pass --translate-algo" if removed.safe else ""
        raise UserError(
            f"'run: {run}' was removed from RLlib ({removed.why})",
            f"RLlib 2.60 has {', '.join(ALGORITHMS)}; {nearest}{rerun}",
        )
    if run not in ALGORITHMS:
        match = {a.lower(): a for a in ALGORITHMS}.get(run.lower())
        raise UserError(
            f"unknown algorithm 'run: {run}'",
            f"did you mean '{match}'?" if match else f"RLlib 2.60 has: {', '.join(ALGORITHMS)}",
        )
    # Import only the chosen algorithm: Tune's registry would import every
    # algorithm (DreamerV3's import alone builds an env and warns).
    algo_class: type[Algorithm] = ALGORITHMS[run]()[0]  # type: ignore[no-untyped-call]
    return algo_class


@dataclass(kw_only=True)
class BuiltConfig:
    """An experiment's algorithm config plus what the runner needs beside it."""

    algo_class: type
    config: AlgorithmConfig
    env: ResolvedEnv
    env_info: EnvInfo
    search_space: dict[tuple[str, ...], Any] = field(default_factory=dict)  # key path -> Tune domain
    search_paths: list[Path] = field(default_factory=list)
    auto_runners: bool = False  # num_env_runners: auto, sized once Ray is up (see size_env_runners)
    models: list[str] = field(default_factory=list)  # "policy: what its network is", one per policy
    user_keys: set[str] = field(default_factory=set)  # config keys the YAML or --config set (2.60 names)
    sampler: str = "rllib"  # the env runners' sampling loop: "batched", or "rllib (why)"
    max_concurrent: int | None = None  # Tune trials at once, when they do not all fit (resources.fit)
    substitutions_off: set[str] = field(default_factory=set)  # substitutions.py: those turned off
    # The experiment as built (config.experiment.record): checkpoints rebuild their config from it
    experiment: dict[str, Any] = field(default_factory=dict)

    def size_env_runners(self, cluster_cpus: float) -> int | None:
        """``num_env_runners: auto``: every CPU of the cluster but the algorithm's and the learners'."""
        if not self.auto_runners:
            return None
        c = self.config

        def number(value: Any) -> float:  # RLlib writes "auto" for some of these
            return float(value) if isinstance(value, int | float) and value else 1.0

        learners = (c.num_learners or 0) * number(c.num_cpus_per_learner)
        reserved = number(c.num_cpus_for_main_process) + learners
        per_runner = number(c.num_cpus_per_env_runner)
        count = max(0, int((cluster_cpus - reserved) // per_runner))
        c.env_runners(num_env_runners=count)
        return count

    def space_paths(self) -> dict[tuple[str, ...], Any]:
        """Where each search space sits in :meth:`param_space`, and its domain."""
        # The new stack keeps model_config in a private attribute.
        return {
            (internals.MODEL_CONFIG_FIELD, *path[1:]) if path[0] == "model_config" else path: domain
            for path, domain in self.search_space.items()
        }

    def param_space(self, chosen: dict[tuple[str, ...], Any] | None = None) -> dict[str, Any]:
        """The dict handed to Tune: the config with search spaces overlaid (or, at each path of
        ``chosen``, the value a trial drew)."""
        space = self.config.to_dict()
        for path, domain in {**self.space_paths(), **(chosen or {})}.items():
            *parents, leaf = path
            node = space
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = domain
        return space

    def take_trial_values(self, chosen: dict[tuple[str, ...], Any]) -> None:
        """Set the values one trial drew from the search spaces (a checkpoint's manifest has them)."""
        space = self.param_space(chosen)
        self.config.update_from_dict({path[0]: space[path[0]] for path in chosen})


def _search_space(value: Any, where: str, ops: Any = SEARCH_SPACES) -> Any | None:
    """The Tune domain a ``{op: [...]}`` value stands for, ``op`` one of ``ops`` (None for any other)."""
    if isinstance(value, dict) and len(value) == 1:
        op, arg = next(iter(value.items()))
        if op in ops:
            return search_domain(op, arg, where)
    return None


def _extract_search_spaces(values: dict, where: Any, prefix: tuple = ()) -> dict[tuple, Any]:
    """Replace search-space values by a representative, returning the domains.

    ``where(key)`` names the YAML line of a top-level key (nested ones report their top key's).
    Inside ``env_config`` (and ``evaluation_config.env_config``) only ``grid_search`` is one, as
    Tune reads it anywhere: another one-key mapping there (``{uniform: [0, 1]}``) may be a setting
    of the env's own.
    """
    found: dict[tuple, Any] = {}
    ops = ("grid_search",) if env_setup.env_config_head(prefix) else SEARCH_SPACES
    for key, value in list(values.items()):
        line = where(prefix[0] if prefix else key)
        domain = _search_space(value, line, ops)
        if domain is not None:
            found[(*prefix, key)] = domain
            values[key] = next(iter(value.values()))[0]
        elif isinstance(value, dict):
            found.update(_extract_search_spaces(value, where, (*prefix, key)))
    return found


def _candidates(domain: Any) -> list[Any]:
    """The values a search space may give (grid and choice), or its bounds."""
    if isinstance(domain, dict) and "grid_search" in domain:
        return list(domain["grid_search"])
    if hasattr(domain, "categories"):
        return list(domain.categories)
    return [getattr(domain, "lower", None), getattr(domain, "upper", None)]


def _check_values(
    values: LineDict, defaults: dict[str, Any], search: dict[tuple, Any], spelled: dict[str, str]
) -> None:
    """Every RLlib config value against the type of RLlib's default (every candidate of a search space)."""
    for key, value in list(values.items()):
        default = defaults.get(key, defaults.get(key.rstrip("_"), _MISSING))
        if key in NOT_TYPE_CHECKED or default is _MISSING:
            continue
        where, name = values.where(key), spelled.get(key, key)
        for candidate in _candidates(search[(key,)]) if (key,) in search else []:
            check_config_value(key, candidate, default, where, name)
        values[key] = check_config_value(key, value, default, where, name)


def _resolve_callbacks(values: dict[str, Any], paths: list[Path]) -> None:
    """``callbacks_on_<event>: module.fn`` (or a list) and Ray 1.x ``callbacks: module.Class`` imported."""
    for key, value in list(values.items()):
        if key == "callbacks" and isinstance(value, str):
            values[key] = import_ref(value, paths, what="callbacks class")
        elif key.startswith("callbacks_on_") and value is not None:
            refs = value if isinstance(value, list) else [value]
            hooks = [import_ref(r, paths, what=key) if isinstance(r, str) else r for r in refs]
            values[key] = hooks if isinstance(value, list) else hooks[0]


class _Translation:
    """The keys translated so far (with their YAML lines) and, per new name, the YAML's name."""

    def __init__(self, raw: LineDict, overridden: frozenset[str] = frozenset()):
        self.raw = raw
        self.overridden = overridden
        self.out = LineDict()
        self.out.source = raw.source
        self.spelled: dict[str, str] = {}

    def put(self, key: str, value: Any, old: str) -> None:
        """``out[key] = value`` from the YAML's key ``old``: mappings merge, a schedule wins, a
        command-line ``--config.KEY`` wins over the file's key for its setting in any spelling,
        two YAML keys for one setting are an error."""
        out, spelled = self.out, self.spelled
        if key in out and isinstance(out[key], dict) and isinstance(value, dict):
            for inner, given in value.items():  # e.g. Q_model and policy_model into model_config
                if inner in out[key] and out[key][inner] != given:
                    notice(f"config key '{old}' sets {key}.{inner} to {given!r}, over {out[key][inner]!r} "
                           f"from '{spelled[key]}' (one setting in RLlib 2.60)")  # fmt: skip
            out[key] = merge(out[key], value)
            return
        if key in out and old in legacy.CONFIG_KEYS and key in SCHEDULED:
            notice(f"config key '{old}' replaces '{key}': the schedule wins, as in Ray 1.x")
        elif key in out and self.overridden & {old, spelled[key]}:
            given, dropped = (old, spelled[key]) if old in self.overridden else (spelled[key], old)
            notice(f"--config.{given} overrides {self.raw.where(dropped)}: '{dropped}' (the same setting)")
            if given != old:
                return
        elif key in out:
            first = self.raw.where(spelled[key])
            raise UserError(
                f"{self.raw.where(old)}: '{old}' sets '{key}', which {first} sets already",
                "keep one of the two",
            )
        out[key], out.lines[key], spelled[key] = value, self.raw.lines.get(old, 0), old


def _translate_key(
    t: _Translation, key: str, value: Any, valid: set[str], algorithm: str, lenient: bool
) -> None:
    """One YAML key into ``t``: removed (an error), dropped, rewritten, renamed, or as it is."""
    raw = t.raw
    if key in legacy.REMOVED_CONFIG_KEYS:
        raise UserError(f"{raw.where(key)}: config key '{key}' was removed from RLlib",
                        legacy.REMOVED_CONFIG_KEYS[key])  # fmt: skip
    if key in legacy.DROPPED_CONFIG_KEYS:
        notice(f"config key '{key}' dropped: {legacy.DROPPED_CONFIG_KEYS[key]}")
        return
    if key in legacy.REWRITES:
        moved, why = legacy.REWRITES[key].apply(
            value, legacy.Context(algorithm, frozenset(valid), raw.where(key))
        )
        if why:
            notice(f"config key '{key}': {why}")
        for new_key, new_value in moved.items():
            t.put(new_key, new_value, key)
        return
    new = legacy.CONFIG_KEYS.get(key, key)
    if new != key and new not in valid:
        notice(f"config key '{key}' dropped: {algorithm} in RLlib 2.60 has no '{new}'")
        return
    if new != key:
        notice(f"config key '{key}' is now '{new}'")
    elif key not in valid:
        if lenient:
            notice(f"config key '{key}' dropped: {algorithm} has no such setting (--translate-algo)")
            return
        near = closest(key, valid | set(legacy.CONFIG_KEYS))
        raise UserError(
            f"{raw.where(key)}: unknown config key '{key}'",
            f"did you mean {', '.join(repr(n) for n in near)}?"
            if near
            else "see docs/yaml.md for valid keys",
        )
    t.put(new, value, key)


def translate(
    raw: LineDict,
    valid: set[str],
    algorithm: str,
    lenient: bool = False,
    overridden: frozenset[str] = frozenset(),
) -> tuple[LineDict, dict[str, str]]:
    """Ray 1.x keys -> 2.60 keys and values (:mod:`envsdk.config.legacy`), each with one notice.

    Returns the translated mapping (keeping each key's line) and new name ->
    the YAML's name.  Unknown keys are errors naming file:line, or with
    ``lenient`` (``--translate-algo``: the file was written for another
    algorithm) dropped with a notice.  ``overridden``: the keys given on the
    command line, which win over the file's spelling of the same setting.
    """
    t = _Translation(raw, overridden)
    for key, value in raw.items():
        _translate_key(t, key, value, valid, algorithm, lenient)
    out = t.out
    legacy.split_learning_rate(out, valid, algorithm)
    if out.pop("_fake_gpus", False):
        out.pop("num_gpus", None)
        out.pop("num_gpus_per_learner", None)
    _check_shapes(out)
    multiagent = out.pop("multiagent", None)
    if multiagent:
        notice("config key 'multiagent' is now top-level policies / policy_mapping_fn / ...")
        for key, value in multiagent.items():
            out.setdefault(key, value)
            out.lines.setdefault(key, raw.lines.get("multiagent", 0))
    if isinstance(out.get("evaluation_config"), dict):  # its keys are config keys too
        evaluation = _evaluation_config(out, raw.lines.get("evaluation_config", 0))
        out["evaluation_config"] = dict(translate(evaluation, valid, algorithm, lenient)[0])
    return out, t.spelled


def _evaluation_config(values: LineDict, line: int) -> LineDict:
    """``evaluation_config`` as a mapping whose every key reports the line of ``evaluation_config``."""
    nested = LineDict(values["evaluation_config"])
    nested.source, nested.lines = values.source, dict.fromkeys(nested, line)
    return nested


def _check_shapes(values: dict[str, Any], where: str | None = None) -> None:
    """Each :data:`SHAPES` key in the form it must have, or a UserError naming its line (``where``:
    the line of the mapping that ``values`` is nested in, else each key's own)."""
    for key, value in values.items():
        if key in SHAPES and value is not None:
            here = where or values.where(key)  # type: ignore[attr-defined]  # top level: a LineDict
            kinds, expected = SHAPES[key]
            if not isinstance(value, kinds):
                raise UserError(f"{here}: '{key}' is {value!r}, but it takes {expected}", "")
            if key in ("model", "multiagent"):
                _check_shapes(value, here)


def valid_keys(config: AlgorithmConfig) -> set[str]:
    """The config keys a YAML may use: the algorithm's (``config.to_dict()``) and :data:`EXTRA_KEYS`.

    A private key of ``to_dict()`` whose public name is a settable property
    (``_train_batch_size_per_learner``) is valid under that public name.
    """
    keys = set(config.to_dict())
    settable = {
        k[1:] for k in keys if isinstance(prop := getattr(type(config), k[1:], None), property) and prop.fset
    }
    return {k for k in keys if not k.startswith("_")} | settable | EXTRA_KEYS


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
    if not info.multi_agent:
        return {"the env": info.agent_spaces[AGENT]}
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


def _model_settings(
    values: dict[str, Any],
    info: EnvInfo,
    algo_class: type[Algorithm],
    run: str,
    paths: list[Path],
    where: str,
    search: dict[tuple, Any],
) -> ModelSettings:
    """Route ``model``/``model_config`` to the ModelV2 dict, an RLModule plugin or the default module.

    ``search``: the experiment's search spaces, whose candidates for the default model's keys are checked.
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
        # RLlib's learner connectors read max_seq_len for a stateful module, with no default there
        return ModelSettings(
            module_spec=RLModuleSpec(module_class=plugin.cls),
            model_config={"max_seq_len": DefaultModelConfig.max_seq_len, **model_config, **options},
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
    defaults = algo_class.get_default_config()
    _check_model_config_keys(model_config, defaults, where)
    for key in sorted(set(model_config) & MODEL_CONFIG_FIELDS):
        here = where_of(given_model_config if key in given_model_config else translated, key, where)
        searched = search.get(("model_config", key))
        for candidate in _candidates(searched) if searched is not None else []:
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


def _multi_agent_settings(values: LineDict, info: EnvInfo, paths: list[Path]) -> dict[str, Any]:
    """Settings for ``config.multi_agent``; the env's own policies when the YAML names none."""
    multi_agent = {k: values.pop(k) for k in MULTI_AGENT_KEYS if k in values}
    named = {str(p) for p in multi_agent.get("policies") or ()}
    if named - {DEFAULT_MODULE_ID} and info.agent_spaces and not info.multi_agent:
        # RLlib would build the modules, then fail in its env runner on the env's missing per-agent spaces.
        where = values.where("policies")
        raise UserError(
            f"{where}: policies {sorted(named)} need a multi-agent env, and this env has one agent",
            "drop policies and policy_mapping_fn (one agent trains one policy), or write a MultiAgentEnv",
        )
    if isinstance(multi_agent.get("policy_mapping_fn"), str):
        ref = multi_agent["policy_mapping_fn"]
        multi_agent["policy_mapping_fn"] = import_ref(ref, paths, what="policy_mapping_fn")
    if isinstance(multi_agent.get("policies"), list):
        multi_agent["policies"] = set(multi_agent["policies"])
    if info.policies and "policies" not in multi_agent:
        specs = info.policies.items()
        multi_agent["policies"] = {pid: PolicySpec(None, obs, act) for pid, (obs, act) in specs}
        multi_agent.setdefault("policy_mapping_fn", info.policy_mapping_fn)
        notice(f"policies from the env: {', '.join(sorted(info.policies))}")
    elif info.multi_agent and info.agent_spaces and not {"policies", "policy_mapping_fn"} & set(multi_agent):
        _policies_from_agents(multi_agent, info)  # a mapping of the user's names its own policies
    return multi_agent


def _policies_from_agents(multi_agent: dict[str, Any], info: EnvInfo) -> None:
    """A multi-agent env's default policies, from its (possible) agents: one shared policy where every
    agent has the same spaces, else one per agent (named by its id).  RLlib's own default, one policy
    with spaces it cannot tell, fails on such an env (PettingZoo's) with a KeyError."""
    spaces = list(info.agent_spaces.values())
    if all(s == spaces[0] for s in spaces[1:]):
        multi_agent["policies"] = {SHARED_POLICY: PolicySpec(None, *spaces[0])}
        multi_agent["policy_mapping_fn"] = SharedPolicy()
        notice(f"one policy, '{SHARED_POLICY}', for all agents ({len(spaces)}): their spaces are equal")
        return
    multi_agent["policies"] = {
        str(a): PolicySpec(None, obs, act) for a, (obs, act) in info.agent_spaces.items()
    }
    multi_agent["policy_mapping_fn"] = PolicyPerAgent()
    notice(f"one policy per agent (their spaces differ): {', '.join(map(str, info.agent_spaces))}")


SHARED_POLICY = "shared_policy"
"""The one policy of a multi-agent env whose agents all have the same spaces and whose YAML names no
policies (not ``default_policy``: RLlib takes a run with only that policy for a single-agent one)."""


class SharedPolicy:
    """Every agent -> :data:`SHARED_POLICY` (picklable)."""

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
        return SHARED_POLICY


class PolicyPerAgent:
    """Agent ``a`` -> policy ``str(a)`` (picklable)."""

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
        return str(agent_id)


def _policy_of(config: AlgorithmConfig, info: EnvInfo) -> dict[str, str]:
    """Agent id -> policy id for the agents of the env's first observation (where the mapping says)."""
    if not info.multi_agent:
        return {AGENT: DEFAULT_MODULE_ID}
    out = {}
    for agent in info.first_obs:
        try:
            out[agent] = config.policy_mapping_fn(agent, None, worker=None)
        except Exception:  # a mapping that needs a live episode: its agents are checked in training
            continue
    return out


def _new_stack_settings(values: LineDict, config: AlgorithmConfig, multi_agent: bool) -> None:
    """Old-stack settings that the new API stack takes in another form."""
    if "num_gpus" in values:  # the YAML asked; an algorithm's own default num_gpus is no request
        gpus = values.pop("num_gpus")
        if gpus:
            notice(f"config key 'num_gpus: {gpus}' is num_gpus_per_learner on the new API stack")
            values.setdefault("num_gpus_per_learner", gpus)
    n_step = values.get("n_step", config.n_step if hasattr(config, "n_step") else None)
    longest = max(n_step) if isinstance(n_step, list | tuple) else n_step
    fragment = values.get("rollout_fragment_length")
    if isinstance(longest, int) and isinstance(fragment, int) and fragment < longest:
        notice(f"rollout_fragment_length {fragment} -> {longest}: the new API stack needs at least n_step")
        values["rollout_fragment_length"] = longest
    kind = values.pop("observation_filter", "NoFilter")
    if kind in ("MeanStdFilter", "ConcurrentMeanStdFilter"):
        notice(
            f"observation_filter: {kind} is an env-to-module connector on the new API stack "
            "(each float Box part normalised; saved with checkpoints)"
        )
        config.env_runners(
            env_to_module_connector=functools.partial(
                observation_filter.mean_std_filter, multi_agent=multi_agent
            )
        )
    elif kind != "NoFilter":
        raise UserError(
            f"{values.where('observation_filter')}: observation_filter '{kind}' has no new-API-stack form",
            "use MeanStdFilter or NoFilter",
        )
    where = values.where("normalize_rewards")
    normalize = values.pop("normalize_rewards", False)
    if not isinstance(normalize, bool):
        raise UserError(f"{where}: normalize_rewards must be true or false, got {normalize!r}", "")
    if normalize:
        _normalize_rewards(values, config, where)


# RLlib's episode replay buffers for one module, and their counterparts for several.
MULTI_AGENT_BUFFERS = {
    "EpisodeReplayBuffer": "MultiAgentEpisodeReplayBuffer",
    "PrioritizedEpisodeReplayBuffer": "MultiAgentPrioritizedEpisodeReplayBuffer",
}


def _fit_replay_buffer(config: AlgorithmConfig, default_config: AlgorithmConfig, values: LineDict) -> None:
    """A replay buffer that can hold what the env runners sample, with the settings it samples with.

    RLlib 2.60 keeps a single-agent buffer type (its DQN/SAC default) for a multi-agent config, whose
    first sample then fails deep inside (``unhashable type: 'slice'``): the multi-agent counterpart
    is taken instead.  And ``replay_buffer_config`` replaces RLlib's defaults whole when its
    ``type`` changes, so a prioritized type named without ``beta`` sampled with ``beta=None``
    (``'>=' not supported``): a missing ``beta`` is the algorithm's default.
    """
    buffer = getattr(config, "replay_buffer_config", None)
    if not isinstance(buffer, dict) or not config.enable_env_runner_and_connector_v2:
        return
    kind = buffer.get("type")
    name = (kind if isinstance(kind, str) else getattr(kind, "__name__", "")).rsplit(".", 1)[-1]
    fitted = dict(buffer)
    if config.is_multi_agent and name in MULTI_AGENT_BUFFERS:
        fitted["type"] = name = MULTI_AGENT_BUFFERS[name]
        if isinstance(values.get("replay_buffer_config"), dict) and "type" in values["replay_buffer_config"]:
            notice(f"replay_buffer_config type {kind} holds one policy's episodes: using {name}")
    if "Prioritized" in name and fitted.get("beta") is None:
        fitted["beta"] = default_config.replay_buffer_config.get("beta", 0.0)  # type: ignore[attr-defined]
    if fitted != buffer:
        config.training(replay_buffer_config=fitted)  # type: ignore[call-arg]


def _normalize_rewards(values: LineDict, config: AlgorithmConfig, where: str) -> None:
    """``normalize_rewards: true``: :mod:`envsdk.training.reward_normalization`'s learner piece."""
    if not isinstance(config, reward_normalization.on_policy_configs()):
        raise UserError(
            f"{where}: normalize_rewards works with {', '.join(reward_normalization.ALGORITHMS)}, "
            f"not {getattr(config.algo_class, '__name__', type(config).__name__)}",
            "remove it, or scale the env's rewards (replayed transitions come out of order)",
        )
    gamma = values.get("gamma", config.gamma)  # a searched gamma: the normaliser uses the default's
    piece = functools.partial(
        reward_normalization.reward_normalizer,
        gamma=gamma if isinstance(gamma, float | int) else config.gamma,
    )
    config.training(learner_connector=piece)


def _self_play(
    config: AlgorithmConfig,
    settings: SelfPlaySettings,
    info: EnvInfo,
    multi_agent: dict[str, Any],
    model: ModelSettings,
    env_class: Any,
    env_config: dict[str, Any],
    values: LineDict,
) -> None:
    """``self_play:``: opponents, mapping and ELO (:mod:`envsdk.training.self_play`) for the env's agents.

    ``env_class``: the env's class or factory (its ``self_play_teams``), or the built env."""
    where = values.where("self_play")
    if model.old_stack:
        raise UserError(
            f"{where}: self_play needs the new API stack", "use an RLModule, not a ModelV2 custom_model"
        )
    if config.input_ != "sampler":
        raise UserError(
            f"{where}: self_play needs games to play, not recorded input", "drop input: or self_play:"
        )
    if not info.multi_agent:
        raise UserError(
            f"{where}: self_play needs a multi-agent env with two teams; this env has one agent",
            "use a MultiAgentEnv (or a Unity game with Behavior?team=N behaviors)",
        )
    if not info.first_obs:
        return  # a dry run that did not start the game: its agents and teams are checked when it starts
    # Every agent the env declares: in a turn-based game only the player to move observes at reset.
    spaces = dict(info.agent_spaces)
    assign = self_play.assignment(
        settings,
        self_play.env_teams(env_class, env_config),
        multi_agent.get("policy_mapping_fn"),
        list(spaces),
    )
    seed = int(values.get("seed") or 0)
    trained = self_play.configure(config, settings, assign, spaces, model.module_spec, seed)
    notice(
        f"self-play: {', '.join(trained)} learn against frozen snapshots"
        f" ({', '.join(map(self_play.opponent_of, trained))}),"
        f" a snapshot every {settings.save_steps} steps, the opponent changes every {settings.swap_steps}"
    )


def _atari_preprocessing(values: LineDict, resolved: ResolvedEnv) -> AtariSettings | None:
    """The standard preprocessing for an Atari env unless ``atari_preprocessing: false``
    (:mod:`envsdk.envs.atari`); Ray 1.x's ``model: {dim, grayscale, framestack}`` size it."""
    given = values.pop("atari_preprocessing", None)
    where = values.where("atari_preprocessing")
    ale = resolved.name.split(":")[0] == "ale_py" if resolved.creator is None else False
    if not ale:
        if given not in (None, False):
            raise UserError(
                f"{where}: atari_preprocessing needs an Atari game (an ALE/... id),"
                f" and env is '{resolved.name}'",
                "remove atari_preprocessing, or use an ALE id such as ALE/Pong-v5",
            )
        return None
    model = values.get("model")
    sized = atari.from_model_options(model) if isinstance(model, dict) and given is None else {}
    settings = AtariSettings.parse(sized or given, where)
    if settings is not None:
        notice(f"Atari preprocessing: {settings.describe()} (atari_preprocessing: false to turn it off)")
    return settings


def _check_vectorize_mode(values: LineDict, resolved: ResolvedEnv) -> None:
    """``gym_env_vectorize_mode: vector_entry_point`` needs an env with gymnasium's own vector version.

    RLlib would fail in its env runner (for a class of the user's, after training has started).
    """
    mode = values.get("gym_env_vectorize_mode")
    if str(getattr(mode, "value", mode)).lower() != "vector_entry_point":
        return
    spec = gym.registry.get(resolved.name) if resolved.creator is None else None
    if spec is None or spec.vector_entry_point is None:
        raise UserError(
            f"{values.where('gym_env_vectorize_mode')}: env '{resolved.name}' has no vectorized version "
            "(gymnasium's vector_entry_point), which gym_env_vectorize_mode: vector_entry_point needs",
            "drop the key (RLlib steps its envs one by one, 'sync'), or use 'async' for envs in processes",
        )


def _continuous_actions(info: EnvInfo) -> bool:
    """Whether any action space of the env has a Box in it (True when the spaces are unknown)."""
    spaces = [act for _, act in info.agent_spaces.values()]
    if not spaces:
        return True

    def has_box(space: gym.Space) -> bool:
        if isinstance(space, gym.spaces.Box):
            return True
        if isinstance(space, gym.spaces.Dict):
            return any(has_box(sub) for sub in space.spaces.values())
        if isinstance(space, gym.spaces.Tuple):
            return any(has_box(sub) for sub in space.spaces)
        return False

    return any(has_box(space) for space in spaces)


@dataclass(kw_only=True)
class Build:
    """What the stages of :func:`build_config` know so far, each adding its part."""

    exp: Experiment
    dry_run: bool = False
    algo_class: Any = None  # the Algorithm class of `run:`
    raw: LineDict = field(default_factory=LineDict)  # the YAML's config: (with --config overrides)
    default_config: Any = None
    values: LineDict = field(default_factory=LineDict)  # config keys in 2.60 names, ours popped as used
    spelled: dict[str, str] = field(default_factory=dict)  # 2.60 name -> the name the YAML used
    user_keys: set[str] = field(default_factory=set)
    search: dict[tuple[str, ...], Any] = field(default_factory=dict)
    self_play: SelfPlaySettings | None = None
    env_checks: EnvCheckSettings = field(default_factory=EnvCheckSettings)
    auto_runners: bool = False
    paths: list[Path] = field(default_factory=list)
    resolved: Any = None  # ResolvedEnv
    env_config: dict[str, Any] = field(default_factory=dict)
    target: Any = None  # the env's class or factory (None for a plain gymnasium id)
    env_hooks: Any = None  # RLlibHooks
    evaluation_env: ResolvedEnv | None = None
    evaluation_hooks: Any = None
    env: Any = None  # the env the start-up check built (None in a dry run that does not start it)
    info: Any = None  # EnvInfo
    model: Any = None  # _ModelSettings
    multi_agent: dict[str, Any] = field(default_factory=dict)
    config: Any = None  # the AlgorithmConfig
    models: list[str] = field(default_factory=list)
    sampler: str = "batched"  # the `sampler:` key; then what the env runners use (see stage_sampler)
    off: set[str] = field(default_factory=set)  # substitutions turned off (substitutions.py)


def build_config(
    exp: Experiment, overrides: dict[str, Any] | None = None, dry_run: bool = False
) -> BuiltConfig:
    """Validate ``exp.config`` (plus CLI overrides) and build the AlgorithmConfig, stage by stage.

    ``dry_run``: an env class with ``build_in_dry_run = False`` (it launches a
    game) is not built; its spaces, policies and models stay unknown.
    """
    quiet_rllib()
    b = Build(exp=exp, dry_run=dry_run, algo_class=algorithm_class(exp.run))
    stage_translate(b, overrides or {})
    stage_values(b)
    stage_env(b)
    with stage_start_env(b):
        stage_evaluation_env(b)
        stage_models(b)
        stage_assemble(b)
        stage_hooks(b)
        stage_sampler(b)
        stage_check_modules(b)
    return stage_finish(b)


def stage_translate(b: Build, overrides: dict[str, Any]) -> None:
    """The YAML's ``config:`` with the overrides, in RLlib 2.60's names; offline input; search spaces."""
    exp = b.exp
    raw = LineDict(copy.deepcopy(dict(exp.config)))
    raw.lines, raw.source = dict(exp.config.lines), exp.config.source
    merged = merge(dict(raw), overrides)
    for key in overrides:
        raw[key] = merged[key]  # item by item, so that raw keeps its YAML line numbers
    b.raw = raw
    b.default_config = b.algo_class.get_default_config()
    b.values, b.spelled = translate(
        raw,
        valid_keys(b.default_config),
        exp.run,
        lenient=exp.translated_from is not None,
        overridden=frozenset(overrides),
    )
    b.user_keys = set(b.values)
    offline.prepare(b.values, exp.run, exp.base_dir)
    b.search = _extract_search_spaces(b.values, b.values.where)


def stage_values(b: Build) -> None:
    """Every value checked (evaluation_config's too), callbacks imported, our own blocks parsed."""
    values = b.values
    defaults = b.default_config.to_dict()
    b.off = substitutions.off_in_environment() | substitutions.off_in_config(
        values.pop(substitutions.KEY, None), values.where(substitutions.KEY)
    )
    _check_values(values, defaults, b.search, b.spelled)
    _per_learner_batch(b, defaults)
    _critic_loss(b)
    if values.get("evaluation_config"):
        evaluation = _evaluation_config(values, values.lines.get("evaluation_config", 0))
        for key in ("model", "model_config"):
            if key in evaluation:  # RLlib: ignored (model) or an AttributeError at build (model_config)
                raise UserError(
                    f"{evaluation.where(key)}: evaluation_config.{key}: evaluation runs the trained"
                    " network, so its settings are training's",
                    f"remove it (set the network under config.{key})",
                )
        _check_values(evaluation, defaults, {}, {})
        values["evaluation_config"] = dict(evaluation)
    _resolve_callbacks(values, [b.exp.base_dir])
    self_play_value = values.pop("self_play", None)
    if self_play_value not in (None, False):
        b.self_play = SelfPlaySettings.parse(self_play_value, values.where("self_play"))
    b.env_checks = EnvCheckSettings.parse(values.pop("env_checks", None), values.where("env_checks"))
    b.sampler = values.pop("sampler", "batched")
    if b.sampler not in batched_runner.SAMPLERS:
        raise UserError(
            f"{values.where('sampler')}: sampler must be one of {', '.join(batched_runner.SAMPLERS)},"
            f" got {b.sampler!r}",
            "use 'batched' (the default: whole-batch sampling) or 'rllib' (RLlib's own env runner loop)",
        )
    b.auto_runners = values.get("num_env_runners") == "auto"
    if b.auto_runners:
        values["num_env_runners"] = 0  # sized after Ray starts, from the cluster's CPUs


def _per_learner_batch(b: Build, defaults: dict[str, Any]) -> None:
    """``train_batch_size`` for an algorithm whose RLlib 2.60 config reads only
    ``train_batch_size_per_learner`` (its defaults set that one: SAC, CQL), where the YAML's
    value would go unused without a word: it moves there (a search space too), with a notice.
    Where RLlib derives the per-learner size from ``train_batch_size`` (PPO, DQN, ...), it stays."""
    values = b.values
    if "train_batch_size" not in values or "train_batch_size_per_learner" in values:
        return
    if internals.per_learner_batch_unset(defaults):
        return
    if (values.get("num_learners") or defaults.get("num_learners") or 0) > 1:
        raise UserError(
            f"{values.where('train_batch_size')}: {b.exp.run} on RLlib 2.60 reads only"
            " train_batch_size_per_learner, and this config has several learners",
            "set train_batch_size_per_learner: the batch each learner updates on",
        )
    values["train_batch_size_per_learner"] = values.pop("train_batch_size")
    if ("train_batch_size",) in b.search:
        b.search[("train_batch_size_per_learner",)] = b.search.pop(("train_batch_size",))
    notice(
        f"config key 'train_batch_size' is 'train_batch_size_per_learner' for {b.exp.run}:"
        " RLlib 2.60 reads only that one"
    )


def _critic_loss(b: Build) -> None:
    """``critic_loss: huber | squared`` (a search space too): the loss of SAC's critics on the TD
    error, which training/sac_learner.py reads from RLlib's ``learner_config_dict``."""
    values = b.values
    if "critic_loss" not in values:
        return
    where = values.where("critic_loss")
    domain = b.search.pop(("critic_loss",), None)
    value = values.pop("critic_loss")
    for candidate in _candidates(domain) if domain is not None else [value]:
        if candidate not in CRITIC_LOSSES:
            raise UserError(
                f"{where}: critic_loss must be one of {', '.join(CRITIC_LOSSES)}, got {candidate!r}",
                "use 'squared' (the SAC paper's and SB3's) or 'huber' (RLlib's, the default)",
            )
    old_stack = values.get("enable_rl_module_and_learner") is False
    if old_stack or "learner_class" in values or b.default_config.learner_class is not RLlibSACTorchLearner:
        raise UserError(
            f"{where}: critic_loss is a setting of RLlib's SAC learner on the new API stack,"
            f" which this {b.exp.run} config does not train with",
            "remove critic_loss (or train with run: SAC and RLlib's SAC learner)",
        )
    if "sac-learner" in b.off:
        raise UserError(
            f"{where}: critic_loss is read by envsdk's SAC learner, which stock: (or {substitutions.STOCK})"
            " turns off; RLlib's own learner always uses the huber loss",
            "remove critic_loss, or keep the sac-learner substitution on",
        )
    values["learner_config_dict"] = {**(values.get("learner_config_dict") or {}), CRITIC_LOSS: value}
    if domain is not None:
        b.search[("learner_config_dict", CRITIC_LOSS)] = domain


def _horizon(values: LineDict, resolved: ResolvedEnv) -> tuple[ResolvedEnv, int | None]:
    """Ray 1.x ``horizon``: episodes cut after N steps (a gymnasium TimeLimit)."""
    horizon = values.pop("horizon", None)
    if horizon is None:
        return resolved, None
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise UserError(f"{values.where('horizon')}: horizon must be a positive integer, got {horizon!r}", "")
    notice(f"config key 'horizon' is a time limit of {horizon} steps on the env")
    return resolved.with_time_limit(horizon), horizon


def stage_env(b: Build) -> None:
    """The env (and evaluation's) resolved, wrapped as config keys ask, its env_config prepared."""
    values = b.values
    values.pop("env", None)  # merged into exp.env (experiment.py, then --env / --config.env)
    b.paths = [b.exp.base_dir]
    resolved = resolve_env(b.exp.env, b.paths)
    atari_settings = _atari_preprocessing(values, resolved)
    resolved, horizon = _horizon(values, resolved)
    dropped = tuple(str(k) for k in values.pop("drop_observation_keys", None) or ())  # MiniGrid's mission
    b.resolved = resolved.wrapped(EnvWrappers(dropped, atari_settings))
    _check_vectorize_mode(values, b.resolved)
    b.target = env_setup.target(b.resolved)
    b.env_hooks = hooks(b.target)
    b.evaluation_env = env_setup.evaluation_env(values, b.paths, horizon)
    b.evaluation_hooks = (
        b.env_hooks if b.evaluation_env is None else hooks(env_setup.target(b.evaluation_env))
    )
    env_config = env_setup.prepare_env_configs(  # e.g. Unity's absolute paths
        b.env_hooks.prepare_env_config,
        b.evaluation_hooks.prepare_env_config,
        values,
        dict(values.pop("env_config", None) or {}),
        b.search,
        b.exp.base_dir,
    )
    b.env_config = b.env_hooks.for_algorithm(env_config, b.exp.run)


START_TRIES = 3  # envs built for the start-up check where the YAML asks RLlib to recreate failing ones


def _start_tries(values: Any) -> int:
    """How many envs the start-up check may build: a run that asks RLlib to recreate failing envs
    or runners trains on an env that fails now and then, so its first step may fail too."""
    asked = values.get("restart_failed_sub_environments") or values.get("restart_failed_env_runners")
    return START_TRIES if asked else 1


@contextlib.contextmanager
def stage_start_env(b: Build) -> Iterator[None]:
    """The start-up check: the env built, reset, stepped and checked (:func:`preflight`), and kept
    open while the later stages build networks on its first observation."""
    skip = b.dry_run and not b.env_hooks.build_in_dry_run
    started = (
        contextlib.nullcontext((None, unbuilt(b.target)))
        if skip
        else preflight(b.resolved, b.env_config, b.env_checks.observation_bounds, _start_tries(b.values))
    )
    with started as (b.env, b.info):
        if b.env is not None and env_setup.needs_layout(b.env, b.resolved):
            b.resolved = b.resolved.laid_out()  # RLlib would build it bare, its action mask as features
        env_setup.register(b.resolved)
        yield


def stage_evaluation_env(b: Build) -> None:
    """evaluation_config.env: its spaces must be training's (checked now, unless it launches a game)."""
    if b.evaluation_env is None:
        return
    if not b.evaluation_hooks.build_in_dry_run:
        # Building it launches something (a Unity game): started once more only to check spaces,
        # it would cost a game start before training; its runners check it when they start it.
        notice(f"evaluation_config.env '{b.evaluation_env.name}' is checked when evaluation starts it")
        return
    own = b.values["evaluation_config"].get("env_config") or {}
    bounds = b.env_checks.observation_bounds
    with preflight(b.evaluation_env, merge(b.env_config, own), bounds) as (_, evaluation_info):
        where = b.values.where("evaluation_config")
        env_setup.check_evaluation_spaces(b.info, evaluation_info, where, b.evaluation_env.name)


def stage_models(b: Build) -> None:
    """Each policy's network (a plugin or the default model), the policies and their mapping, and
    the defaults that follow from the env."""
    values = b.values
    b.model = _model_settings(
        values, b.info, b.algo_class, b.exp.run, search_path(b.exp.base_dir), b.raw.where("model"), b.search
    )
    b.multi_agent = _multi_agent_settings(values, b.info, b.paths)
    values.setdefault("log_level", "ERROR")
    # The preflight above is the env check (with only allowed actions where there is a mask);
    # RLlib's own multi-agent checker steps with random actions, masked ones included.
    values.setdefault("disable_env_checking", True)
    for key, value in b.env_hooks.config_defaults.items():
        values.setdefault(key, value)  # the env's own defaults; the YAML wins
    if not _continuous_actions(b.info):
        # Nothing to unsquash or clip, but RLlib's connector would still copy and
        # walk every action it sends to the env, at every step.
        values.setdefault("normalize_actions", False)
        values.setdefault("clip_actions", False)


def _api_stack(b: Build, config: AlgorithmConfig) -> None:
    """The old API stack for a ModelV2 plugin; the new stack's settings otherwise."""
    values, model = b.values, b.model
    if not model.old_stack:
        _new_stack_settings(values, config, b.info.multi_agent)
        return
    if "normalize_rewards" in values:
        raise UserError(
            f"{values.where('normalize_rewards')}: normalize_rewards needs the new API stack",
            "a ModelV2 custom_model runs on the old stack; use an RLModule plugin",
        )
    notice(
        f"custom_model '{plugin_name(model.old_stack_model['custom_model'])}' is a ModelV2: using RLlib's"
        " old API stack"
    )
    config.api_stack(enable_rl_module_and_learner=False, enable_env_runner_and_connector_v2=False)


def stage_assemble(b: Build) -> None:
    """The AlgorithmConfig from the values, the env, the models and the multi-agent settings;
    RLlib's own validation, whose errors name the YAML."""
    values, model = b.values, b.model
    config: AlgorithmConfig = b.algo_class.get_default_config()
    _api_stack(b, config)
    curriculum = values.pop("curriculum", None)
    try:
        config.update_from_dict(values)
        config.environment(env=b.resolved.name, env_config=b.env_config)
        if b.multi_agent:
            config.multi_agent(**b.multi_agent)
        if model.old_stack:
            config.training(model=model.old_stack_model)
        if model.module_spec is not None:
            config.rl_module(rl_module_spec=model.module_spec)
        if model.model_config:
            config.rl_module(model_config=model.model_config)
        _fit_replay_buffer(config, b.default_config, values)
        if b.self_play is not None:
            _self_play(
                config, b.self_play, b.info, b.multi_agent, model, b.target or b.env, b.env_config, values
            )
        config.validate()
        guards.install(config, b.env_checks, values.where("env_checks"), "sample_timeout_s" in values, b.off)
    except (ValueError, TypeError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"{b.raw.source}: RLlib rejected the config: {first}",
            "adjust the named setting in the YAML (or the --config override)",
        ) from err
    if curriculum:
        import_ref(str(curriculum), b.paths, what="curriculum function")  # fail early
        hook = functools.partial(apply_curriculum, ref=str(curriculum), search=[str(p) for p in b.paths])
        add_callback(config, "on_train_result", hook)
    b.config = config


def stage_hooks(b: Build) -> None:
    """Our callbacks that ride inside RLlib, beside the user's (the new API stack only)."""
    config, env_hooks = b.config, b.env_hooks
    for event, hook in env_hooks.env_callbacks.items():
        add_callback(config, event, hook)  # e.g. the Unity env's game stats as metrics
    if b.model.old_stack:
        return  # the old stack smooths its episode metrics itself, and takes no callback functions
    patches_off = sorted(set(substitutions.PATCHES) & b.off)
    hook = (
        functools.partial(speedups.on_env_runner, off=patches_off) if patches_off else speedups.on_env_runner
    )
    add_callback(config, "on_environment_created", hook, first=True)
    add_callback(config, "on_episode_end", episode_window.log_episode)
    window = episode_window.EpisodeWindow(config.metrics_num_episodes_for_smoothing)
    add_callback(config, "on_train_result", window, first=True)
    if not env_hooks.stable_agent_ids:
        add_callback(config, "on_sample_end", agent_metrics.drop_per_agent_metrics)
        add_callback(config, "on_train_result", agent_metrics.drop_agent_episode_metrics)
    if b.evaluation_env is not None and b.evaluation_hooks is not env_hooks:
        given = dict(b.values.get("evaluation_config") or {})
        env_setup.evaluation_own_hooks(config, env_hooks, b.evaluation_hooks, given)


def stage_sampler(b: Build) -> None:
    """``sampler:``: single-agent env runners sample with the batched loop
    (:mod:`envsdk.training.batched_runner`) unless the config needs RLlib's, which a notice names."""
    config = b.config
    if b.sampler == "rllib" or b.model.old_stack or "batched-sampler" in b.off:
        b.sampler = "rllib" if "batched-sampler" not in b.off else "rllib (stock: batched-sampler off)"
        return
    if config.env_runner_cls is not None:
        b.sampler = f"rllib ({config.env_runner_cls.__name__}, the config's env_runner_cls)"
        return
    why = batched_runner.why_not_batched(config)
    if why is not None:
        notice(f"sampler: RLlib's env runner loop, as {why}")
        b.sampler = f"rllib ({why})"
        return
    config.env_runners(env_runner_cls=batched_runner.BatchedEnvRunner)


def stage_check_modules(b: Build) -> None:
    """Each policy's network built and run on the env's first observation; one line per policy."""
    if b.env is None:
        b.models = ["decided when the env starts (a dry run does not start it)"]
    elif not b.model.old_stack:
        found = check_modules(b.config, b.env, b.info.first_obs, _policy_of(b.config, b.info), b.model.plugin)
        b.models = [m for m in found if not m.startswith(f"{self_play.LEDGER}:")]


def stage_finish(b: Build) -> BuiltConfig:
    """Our DQN/SAC in place of RLlib's (transition replay; one backward pass), and the record."""
    replaced = "transition-replay" not in b.off
    algo_class = off_policy.REPLACEMENTS.get(b.algo_class, b.algo_class) if replaced else b.algo_class
    config = b.config
    if (
        "sac-learner" not in b.off
        and config.enable_rl_module_and_learner
        and config.learner_class is RLlibSACTorchLearner
    ):
        config.training(learner_class=SACTorchLearner)  # one backward pass where it gives the same gradients
    config.algo_class = algo_class
    return BuiltConfig(
        algo_class=algo_class,
        config=config,
        env=b.resolved,
        env_info=b.info,
        search_space=b.search,
        search_paths=b.paths,
        auto_runners=b.auto_runners,
        models=b.models,
        user_keys=b.user_keys,
        sampler=b.sampler,
        experiment=record(b.exp, b.raw),
        substitutions_off=b.off,
    )
