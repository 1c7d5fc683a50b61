"""Every key of mlagents-learn 1.1.0's settings (its ``mlagents/trainers/settings.py``), its default
and its type, and the checks its loader makes.

:func:`checked_run_options` returns the file with every default filled in, as mlagents-learn's
``RunOptions`` would hold it (``default_settings`` merged under each behavior first, as its loader
does), or raises a :class:`~envsdk.errors.UserError` naming ``file:line`` where mlagents-learn would
refuse the file: an unknown key, a value of the wrong type, a choice it does not know.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from envsdk.config.yamlio import LineDict, where_of
from envsdk.errors import UserError, did_you_mean


@dataclass(frozen=True)
class Key:
    """One setting: its default and what it takes (``int``, ``float``, ``bool``, ``str``,
    ``mapping``, ``list``, or one of ``choices``)."""

    default: Any
    kind: str
    choices: tuple[str, ...] = ()


def _n(default: Any) -> Key:
    """A number key, whose kind its default says."""
    return Key(default, "bool" if isinstance(default, bool) else type(default).__name__)


SCHEDULES = ("linear", "constant")
ENCODERS = ("simple", "nature_cnn", "resnet", "match3", "fully_connected")
TRAINER_TYPES = ("ppo", "sac", "poca")
REWARD_SIGNALS = ("extrinsic", "gail", "curiosity", "rnd")

MEMORY = {"sequence_length": _n(64), "memory_size": _n(128)}
NETWORK = {
    "normalize": _n(False),
    "hidden_units": _n(128),
    "num_layers": _n(2),
    "vis_encode_type": Key("simple", "str", ENCODERS),
    "memory": Key(None, "mapping"),
    "goal_conditioning_type": Key("hyper", "str", ("hyper", "none")),
    "deterministic": _n(False),
}
_COMMON_HYPER = {
    "batch_size": _n(1024),
    "buffer_size": _n(10240),
    "learning_rate": _n(3.0e-4),
    "learning_rate_schedule": Key("constant", "str", SCHEDULES),
}
_ON_POLICY = {
    **_COMMON_HYPER,
    "learning_rate_schedule": Key("linear", "str", SCHEDULES),
    "num_epoch": _n(3),
    "beta": _n(5.0e-3),
    "epsilon": _n(0.2),
    "lambd": _n(0.95),
    # None: as learning_rate_schedule, when that is given (mlagents' check_hyperparam_schedules)
    "beta_schedule": Key("linear", "str", SCHEDULES),
    "epsilon_schedule": Key("linear", "str", SCHEDULES),
}
HYPERPARAMETERS: dict[str, dict[str, Key]] = {
    "ppo": {**_ON_POLICY, "shared_critic": _n(False)},
    "poca": dict(_ON_POLICY),
    "sac": {
        **_COMMON_HYPER,
        "batch_size": _n(128),
        "buffer_size": _n(50000),
        "buffer_init_steps": _n(0),
        "tau": _n(0.005),
        "steps_per_update": _n(1.0),
        "save_replay_buffer": _n(False),
        "init_entcoef": _n(1.0),
        "reward_signal_steps_per_update": Key(None, "float"),  # None: steps_per_update
    },
}
REWARD_SIGNAL = {"gamma": _n(0.99), "strength": _n(1.0), "network_settings": Key(None, "mapping")}
REWARD_SIGNAL_EXTRA: dict[str, dict[str, Key]] = {
    "extrinsic": {},
    "curiosity": {"learning_rate": _n(3e-4), "encoding_size": Key(None, "int")},
    "rnd": {"learning_rate": _n(1e-4), "encoding_size": Key(None, "int")},
    "gail": {
        "learning_rate": _n(3e-4),
        "encoding_size": Key(None, "int"),
        "use_actions": _n(False),
        "use_vail": _n(False),
        "demo_path": Key(None, "str"),
    },
}
BEHAVIORAL_CLONING = {
    "demo_path": Key(None, "str"),
    "steps": _n(0),
    "strength": _n(1.0),
    "samples_per_update": _n(0),
    "num_epoch": Key(None, "int"),
    "batch_size": Key(None, "int"),
}
SELF_PLAY = {
    "save_steps": _n(20000),
    "team_change": Key(None, "int"),  # None: 5 x save_steps
    "swap_steps": _n(2000),
    "window": _n(10),
    "play_against_latest_model_ratio": _n(0.5),
    "initial_elo": _n(1200.0),
}
TRAINER = {
    "trainer_type": Key("ppo", "str", TRAINER_TYPES),
    "hyperparameters": Key(None, "mapping"),
    "checkpoint_interval": _n(500000),
    "network_settings": Key(None, "mapping"),
    "reward_signals": Key(None, "mapping"),
    "init_path": Key(None, "str"),
    "keep_checkpoints": _n(5),
    "even_checkpoints": _n(False),
    "max_steps": _n(500000),
    "time_horizon": _n(64),
    "summary_freq": _n(50000),
    "threaded": _n(False),
    "self_play": Key(None, "mapping"),
    "behavioral_cloning": Key(None, "mapping"),
}
ENV_SETTINGS = {
    "env_path": Key(None, "str"),
    "env_args": Key(None, "list"),
    "base_port": _n(5005),
    "num_envs": _n(1),
    "num_areas": _n(1),
    "timeout_wait": _n(60),
    "seed": _n(-1),
    "max_lifetime_restarts": _n(10),
    "restarts_rate_limit_n": _n(1),
    "restarts_rate_limit_period_s": _n(60),
}
ENGINE_SETTINGS = {
    "width": _n(84),
    "height": _n(84),
    "quality_level": _n(5),
    "time_scale": _n(20.0),
    "target_frame_rate": _n(-1),
    "capture_frame_rate": _n(60),
    "no_graphics": _n(False),
    "no_graphics_monitor": _n(False),
}
CHECKPOINT_SETTINGS = {
    "run_id": Key("ppo", "str"),
    "initialize_from": Key(None, "str"),
    "load_model": _n(False),
    "resume": _n(False),
    "force": _n(False),
    "train_model": _n(False),
    "inference": _n(False),
    "results_dir": Key("results", "str"),
}
TORCH_SETTINGS = {"device": Key(None, "str")}
SECTIONS = {
    "env_settings": ENV_SETTINGS,
    "engine_settings": ENGINE_SETTINGS,
    "checkpoint_settings": CHECKPOINT_SETTINGS,
    "torch_settings": TORCH_SETTINGS,
}
TOP = {"behaviors", "default_settings", "environment_parameters", "debug", *SECTIONS}


def is_trainer_config(data: Any) -> bool:
    """Whether a YAML document is mlagents-learn's (``behaviors:`` at the top level)."""
    return isinstance(data, dict) and "behaviors" in data


def _fits(value: Any, key: Key) -> bool:
    if value is None:
        return key.default is None
    if key.kind == "bool":
        return isinstance(value, bool)
    if key.kind == "int":
        return (isinstance(value, int) and not isinstance(value, bool)) or _integral_float(value)
    if key.kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if key.kind == "str":
        return isinstance(value, str) and (not key.choices or value in key.choices)
    return isinstance(value, dict if key.kind == "mapping" else list)


def _integral_float(value: Any) -> bool:
    """``max_steps: 5.0e5``: mlagents reads integer keys written as floats (``int(float(v))``)."""
    return isinstance(value, float) and value.is_integer()


def _expected(key: Key) -> str:
    if key.choices:
        return "one of " + ", ".join(key.choices)
    return {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}.get(
        key.kind, f"a {key.kind}"
    )


def _known(name: Any, names: Any, at: str, what: str, listed: str) -> None:
    """A name mlagents-learn does not know: refused with its line and the nearest one."""
    if name not in names:
        raise UserError(
            f"{at}: '{name}' is no {what}",
            did_you_mean(str(name), names) or f"{listed}: {', '.join(names)}",
        )


def checked(values: Any, keys: dict[str, Key], section: str, where: str) -> LineDict:
    """``values`` (a YAML mapping of ``section``) with its defaults filled in, every key checked."""
    if values is None:
        values = LineDict()
    if not isinstance(values, dict):
        raise UserError(f"{where}: '{section}' must be a mapping, got {values!r}", "")
    out = LineDict({name: copy.deepcopy(key.default) for name, key in keys.items()})
    out.source, out.lines = getattr(values, "source", None), dict(getattr(values, "lines", {}))
    for name, value in values.items():
        at = where_of(values, name, where)
        _known(name, keys, at, f"setting of mlagents-learn's {section}", "its settings")
        if not _fits(value, keys[name]):
            raise UserError(f"{at}: {section}.{name} is {value!r}, but it takes {_expected(keys[name])}", "")
        out[name] = int(value) if keys[name].kind == "int" and _integral_float(value) else value
    return out


def deep_update(base: dict, extra: dict) -> LineDict:
    """``extra`` over ``base``, mappings merged key by key (mlagents' ``deep_update_dict``)."""
    out = LineDict(base)
    out.source = getattr(extra, "source", None) or getattr(base, "source", None)
    out.lines = {**getattr(base, "lines", {}), **getattr(extra, "lines", {})}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_update(out[key], value)
        else:
            out[key] = value
    return out


def checked_trainer(values: Any, where: str) -> LineDict:
    """One behavior's settings, every default filled in (mlagents' ``TrainerSettings.structure``)."""
    trainer = checked(values, TRAINER, "trainer settings", where)
    kind = trainer["trainer_type"]
    hyper = trainer["hyperparameters"] or LineDict()
    if trainer["hyperparameters"] is not None and "trainer_type" not in values:
        raise UserError(
            f"{where_of(values, 'hyperparameters', where)}: hyperparameters without a trainer_type",
            "add 'trainer_type: ppo' (or sac, poca) beside hyperparameters, as mlagents-learn asks",
        )
    given = set(hyper)
    trainer["hyperparameters"] = checked(hyper, HYPERPARAMETERS[kind], f"{kind} hyperparameters", where)
    if kind != "sac" and "learning_rate_schedule" in given:  # mlagents' check_hyperparam_schedules
        for follower in ("beta_schedule", "epsilon_schedule"):
            if follower not in given:
                trainer["hyperparameters"][follower] = trainer["hyperparameters"]["learning_rate_schedule"]
    network = trainer["network_settings"]
    trainer["network_settings"] = checked(network, NETWORK, "network_settings", where)
    if trainer["network_settings"]["memory"] is not None:
        _check_memory(trainer, where_of(network, "memory", where))
    trainer["reward_signals"] = _reward_signals(trainer["reward_signals"], where)
    for name, keys in (("self_play", SELF_PLAY), ("behavioral_cloning", BEHAVIORAL_CLONING)):
        if trainer[name] is not None:
            trainer[name] = checked(trainer[name], keys, name, where_of(values, name, where))
    return trainer


def _check_memory(trainer: LineDict, where: str) -> None:
    memory = checked(trainer["network_settings"]["memory"], MEMORY, "memory", where)
    trainer["network_settings"]["memory"] = memory
    if memory["memory_size"] <= 0 or memory["memory_size"] % 2:
        raise UserError(f"{where}: memory_size is {memory['memory_size']}", "give an even number above 0")
    if memory["sequence_length"] > trainer["hyperparameters"]["batch_size"]:
        raise UserError(
            f"{where}: sequence_length {memory['sequence_length']} is longer than batch_size"
            f" {trainer['hyperparameters']['batch_size']}",
            "make batch_size at least sequence_length (mlagents-learn refuses it too)",
        )


def _reward_signals(values: Any, where: str) -> LineDict:
    if values is None:  # mlagents' default: extrinsic at gamma 0.99, strength 1
        return LineDict(extrinsic=checked(None, REWARD_SIGNAL, "reward_signals.extrinsic", where))
    if not isinstance(values, dict):
        raise UserError(f"{where}: reward_signals must be a mapping of signal names", "")
    out = LineDict()
    out.source, out.lines = getattr(values, "source", None), dict(getattr(values, "lines", {}))
    for name, settings in values.items():
        at = where_of(values, name, where)
        _known(name, REWARD_SIGNALS, at, "reward signal of mlagents-learn", "its signals")
        out[name] = checked(
            settings, {**REWARD_SIGNAL, **REWARD_SIGNAL_EXTRA[name]}, f"reward_signals.{name}", at
        )
    return out


def checked_run_options(data: LineDict) -> LineDict:
    """The whole file with its defaults filled in, as mlagents-learn's ``RunOptions.from_dict``."""
    where = data.where(None)
    for key in data:
        if key not in TOP:
            raise UserError(
                f"{data.where(key)}: '{key}' is no top-level key of mlagents-learn's trainer config",
                did_you_mean(str(key), TOP) or f"its keys: {', '.join(sorted(TOP))}",
            )
    out = LineDict(data)
    out.source, out.lines = data.source, dict(data.lines)
    for section, keys in SECTIONS.items():
        out[section] = checked(data.get(section), keys, section, data.where(section))
    behaviors = data.get("behaviors")
    if not isinstance(behaviors, dict) or not behaviors:
        raise UserError(
            f"{data.where('behaviors')}: 'behaviors' must map each behavior name to its settings",
            "write 'behaviors:' then the behavior name (as the game's Behavior Parameters name it)",
        )
    default = data.get("default_settings") or LineDict()
    merged = LineDict()
    merged.source, merged.lines = data.source, dict(getattr(behaviors, "lines", {}))
    for name, settings in behaviors.items():
        at = where_of(behaviors, name, where)
        if not isinstance(settings, dict):
            raise UserError(f"{at}: behavior '{name}' must be a mapping of its settings", "")
        merged[str(name)] = checked_trainer(deep_update(default, settings), at)
    out["behaviors"] = merged
    return out
