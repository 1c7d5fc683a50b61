"""The YAML's ``config:`` keys in RLlib 2.60's names, checked one by one; search spaces taken out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from envsdk import substitutions
from envsdk.config import legacy
from envsdk.config.validation import (
    SEARCH_SPACES,
    check_config_value,
    search_domain,
)
from envsdk.config.yamlio import LineDict, merge
from envsdk.errors import UserError, closest
from envsdk.notices import notice
from envsdk.training.build import env_setup

_MISSING = object()


SCHEDULED = {"lr", "entropy_coeff"}  # where a Ray 1.x *_schedule key replaces the plain value


# Keys handled by this module itself (checked where they are used), not by their RLlib default's type.
NOT_TYPE_CHECKED = {"input", "env", "env_config", "model", "model_config", "curriculum", "callbacks",
                    "policies", "env_checks", "environment_parameters", "policy_max_steps", "initialize_from",
                    "time_horizon", "policy_mapping_fn", "policies_to_train", "multiagent",
                    "self_play", "reward_signals", "behavioral_cloning"}  # fmt: skip


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
    "policies_to_train": (
        (list, tuple, set, str, Callable),
        "a list of policy names, e.g. [red], or an import path",
    ),
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
    "environment_parameters",
    "policy_max_steps",
    "initialize_from",
    "time_horizon",
    "sampler",
    "critic_loss",
    "advantage_normalization",
    "random_steps",
    "reward_signals",
    "behavioral_cloning",
    substitutions.KEY,
}


def _search_space(value: Any, where: str, ops: Any = SEARCH_SPACES) -> Any | None:
    """The Tune domain a ``{op: [...]}`` value stands for, ``op`` one of ``ops`` (None for any other)."""
    if isinstance(value, dict) and len(value) == 1:
        op, arg = next(iter(value.items()))
        if op in ops:
            return search_domain(op, arg, where)
    return None


def extract_search_spaces(values: dict, where: Any, prefix: tuple = ()) -> dict[tuple, Any]:
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
            found.update(extract_search_spaces(value, where, (*prefix, key)))
    return found


def search_candidates(domain: Any) -> list[Any]:
    """The values a search space may give (grid and choice), or its bounds."""
    if isinstance(domain, dict) and "grid_search" in domain:
        return list(domain["grid_search"])
    if hasattr(domain, "categories"):
        return list(domain.categories)
    return [getattr(domain, "lower", None), getattr(domain, "upper", None)]


def check_values(
    values: LineDict, defaults: dict[str, Any], search: dict[tuple, Any], spelled: dict[str, str]
) -> None:
    """Every RLlib config value against the type of RLlib's default (every candidate of a search space)."""
    for key, value in list(values.items()):
        default = defaults.get(key, defaults.get(key.rstrip("_"), _MISSING))
        if key in NOT_TYPE_CHECKED or default is _MISSING:
            continue
        where, name = values.where(key), spelled.get(key, key)
        for candidate in search_candidates(search[(key,)]) if (key,) in search else []:
            check_config_value(key, candidate, default, where, name)
        values[key] = check_config_value(key, value, default, where, name)


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
        evaluation = evaluation_settings(out, raw.lines.get("evaluation_config", 0))
        out["evaluation_config"] = dict(translate(evaluation, valid, algorithm, lenient)[0])
    return out, t.spelled


def evaluation_settings(values: LineDict, line: int) -> LineDict:
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
