"""Checks of an experiment's values, made before Ray or any env starts.

Every check raises a :class:`~envsdk.errors.UserError` naming ``file:line``,
the key, the value and what is expected:

* config values against the type of RLlib's default for the key
  (:func:`check_config_value`), plus ranges where a key has one
  (:data:`RANGES`);
* the default model's ``model_config`` values: layer sizes, activation and
  initializer names, conv filters (:func:`check_model_config_value`);
* metric names (stop criteria, ``checkpoint_score_attr``, a scheduler's
  ``time_attr``/``metric``) against what RLlib 2.60 reports
  (:func:`check_metric`), Ray 1.x names translated;
* search spaces (:func:`search_domain`) and schedulers
  (:func:`build_scheduler`) by their arguments.

Metrics that RLlib does not define (a custom metric logged by a callback)
cannot be known in advance; they are checked once results arrive
(:mod:`envsdk.config.stopping`).
"""

from __future__ import annotations

import inspect
import math
import numbers
from typing import Any

from envsdk import progress
from envsdk.config import legacy
from envsdk.config.own_keys import environment_parameters
from envsdk.config.yamlio import where_of
from envsdk.errors import UserError, closest, did_you_mean
from envsdk.internals import is_deprecated_default
from envsdk.notices import notice

# ---- config values ---------------------------------------------------------------------

# Keys that take another form beside their default's type: "auto", or a schedule
# ([[timestep, value], ...]) where the default is a plain number.
AUTO_KEYS = {"rollout_fragment_length", "num_env_runners", "evaluation_duration", "num_cpus_per_learner"}
SCHEDULE_KEYS = {"lr", "entropy_coeff", "epsilon", "alpha_lr", "actor_lr", "critic_lr", "clip_param"}
# String keys that take one of a few words (RLlib checks these only when set through its methods).
CHOICES = {
    "batch_mode": ("truncate_episodes", "complete_episodes"),
    "count_steps_by": ("env_steps", "agent_steps"),
}

# (low, high, low inclusive): a value outside is an error.  Counts ("num_*") are >= 0 anyway.
RANGES: dict[str, tuple[float, float, bool]] = {
    "lr": (0.0, math.inf, False),
    "gamma": (0.0, 1.0, True),
    "lambda_": (0.0, 1.0, True),
    "tau": (0.0, 1.0, True),
    "train_batch_size": (1, math.inf, True),
    "train_batch_size_per_learner": (1, math.inf, True),
    "minibatch_size": (1, math.inf, True),
    "num_epochs": (1, math.inf, True),
    "rollout_fragment_length": (1, math.inf, True),
    "num_envs_per_env_runner": (1, math.inf, True),
    "clip_param": (0.0, math.inf, False),
    "vf_clip_param": (0.0, math.inf, False),
    "entropy_coeff": (0.0, math.inf, True),
    "kl_coeff": (0.0, math.inf, True),
    "vf_loss_coeff": (0.0, math.inf, True),
    "grad_clip": (0.0, math.inf, False),
    "num_gpus_per_learner": (0.0, math.inf, True),
    "num_cpus_per_env_runner": (0.0, math.inf, True),
    "num_gpus_per_env_runner": (0.0, math.inf, True),
    # model_config (RLlib's DefaultModelConfig)
    "max_seq_len": (1, math.inf, True),
    "lstm_cell_size": (1, math.inf, True),
    "log_std_clip_param": (0.0, math.inf, False),
}


def _kind(default: Any) -> str:
    if isinstance(default, bool):
        return "a boolean (true/false)"
    if isinstance(default, int):
        return "an integer"
    if isinstance(default, float):
        return "a number"
    if isinstance(default, str):
        return "a string"
    if isinstance(default, list | tuple):
        return "a list"
    if isinstance(default, dict):
        return "a mapping"
    return type(default).__name__


def _yaml(value: Any) -> str:
    """``value`` as a YAML file would write it, for the examples in messages."""
    if isinstance(value, bool):
        return str(value).lower()
    return value if isinstance(value, str) else repr(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_schedule(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and bool(value)
        and all(isinstance(p, list | tuple) and len(p) == 2 and all(map(_is_number, p)) for p in value)
    )


def _takes_integer(key: str, default: Any) -> bool:
    return not isinstance(default, bool) and (
        isinstance(default, int) or (key in AUTO_KEYS and default == "auto")
    )


def _type_problem(key: str, value: Any, default: Any) -> str | None:
    """What a value of a key whose RLlib default is ``default`` must be, when ``value`` is not that."""
    if isinstance(default, bool):
        return None if isinstance(value, bool) else _kind(default)
    if _takes_integer(key, default):
        integral = _is_number(value) and not (isinstance(value, float) and not value.is_integer())
        return None if integral else "an integer" + (" or 'auto'" if key in AUTO_KEYS else "")
    if isinstance(default, float):
        schedule = " or a schedule [[timestep, value], ...]" if key in SCHEDULE_KEYS else ""
        return None if _is_number(value) else "a number" + schedule
    if isinstance(default, str):
        if not isinstance(value, str):
            return _kind(default)
        return " or ".join(CHOICES[key]) if key in CHOICES and value not in CHOICES[key] else None
    if isinstance(default, list | tuple):
        return None if isinstance(value, list | tuple) else _kind(default)
    if isinstance(default, dict) and not isinstance(value, dict):
        return _kind(default)
    return None


def check_config_value(
    key: str, value: Any, default: Any, where: str, spelled: str | None = None, section: str = "config"
) -> Any:
    """``value`` for config ``key``, or a UserError; integral floats for integer keys become ints.

    ``spelled``: the key as the YAML wrote it (a Ray 1.x name), for the message;
    ``section``: the mapping the key is in, for the message.
    """
    what = f"'{spelled}' (now '{key}')" if spelled and spelled != key else f"'{key}'"

    def wrong(expected: str) -> UserError:
        return UserError(
            f"{where}: {section} key {what} is {value!r}, but it takes {expected}",
            f"write e.g. '{key}: {_yaml(default)}' (RLlib's default)" if default is not None else "",
        )

    if value is None or default is None or callable(default) or is_deprecated_default(default):
        return value  # RLlib's own validation (and the algorithm build) judge these
    if key in AUTO_KEYS and value == "auto":
        return value
    if key in SCHEDULE_KEYS and isinstance(value, list | tuple):
        if not _is_schedule(value):
            raise wrong("a number or a schedule [[timestep, value], ...]")
        return value
    expected = _type_problem(key, value, default)
    if expected is not None:
        raise wrong(expected)
    if _takes_integer(key, default):
        value = int(value)
    _check_range(key, value, f"{where}: {section} key {what}")
    return value


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


# The lower-case names RLlib's get_activation_fn resolves; it also takes torch.nn's class names
# (Sigmoid, GELU, LeakyReLU), but not their lower-case spelling.
ACTIVATIONS = ["linear", "relu", "tanh", "elu", "swish", "silu", "softmax"]


def _activation_hint(value: Any) -> str:
    """The fix for an activation RLlib does not resolve: torch.nn's class of that name, else the closest."""
    import torch

    folded = str(value).lower().replace("_", "")
    classes = [n for n in torch.nn.modules.activation.__all__ if n.lower() == folded]
    if classes:
        lower = ", ".join(ACTIVATIONS)
        return f"write '{classes[0]}' (torch.nn's class; RLlib knows only {lower} in lower case)"
    return did_you_mean(str(value).lower(), ACTIVATIONS)


# The model_config keys, by how they end, that name parts of a network rather than plain values
# (with conv_filters).
_NETWORK_SUFFIXES = ("_hiddens", "_activation", "_initializer", "_kwargs")


def check_model_config_value(key: str, value: Any, where: str) -> Any:
    """A value for ``key``, a field of RLlib's ``DefaultModelConfig`` (the default model's settings), or a
    UserError: layer sizes, activation and initializer names as RLlib resolves them, conv filters
    as ``[[out_channels, kernel, stride], ...]``, and the rest by the type of the field's default.
    Checked here because RLlib reads these only as it builds the networks, where a wrong one
    fails deep inside a layer's constructor."""
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig

    if value is None or callable(value):
        return value
    default = getattr(DefaultModelConfig(), key)
    if not key.endswith(_NETWORK_SUFFIXES) and key != "conv_filters":
        return check_config_value(key, value, default, where, section="model_config")
    problem = _network_value_problem(key, value, default)
    if problem is not None:
        expected, example, hint = problem
        raise UserError(
            f"{where}: model_config key '{key}' is {value!r}, but it takes {expected}",
            hint or f"write e.g. '{key}: {example}'",
        )
    return value


def _network_value_problem(key: str, value: Any, default: Any) -> tuple[str, Any, str] | None:
    """What a network key's value (one of :data:`_NETWORK_SUFFIXES`, else ``conv_filters``) must be,
    when ``value`` is not that: (what it takes, an example, a hint that replaces the example where
    there is one)."""
    if key.endswith("_hiddens"):
        if not isinstance(value, list | tuple) or not all(map(_is_size, value)):
            return "a list of layer sizes (integers >= 1)", "[256, 256]", ""
        return None
    if key.endswith("_activation"):
        return _activation_problem(value, default)
    if key.endswith("_initializer"):
        return _initializer_problem(value)
    if key.endswith("_kwargs"):
        if not isinstance(value, dict):
            return "a mapping of the initializer's arguments", "{gain: 1.41}", ""
        return None
    if not isinstance(value, list | tuple) or not value or not all(map(_is_conv_layer, value)):
        expected = "a list of [out_channels, kernel, stride] layers (a 4th item: padding, same or valid)"
        return expected, "[[16, 4, 2], [32, 4, 2]]", ""
    return None


def _activation_problem(value: Any, default: Any) -> tuple[str, Any, str] | None:
    """An activation RLlib's ``get_activation_fn`` does not resolve: what it takes, and the fix."""
    from ray.rllib.models.utils import get_activation_fn

    try:
        get_activation_fn(value, framework="torch")
    except (ValueError, TypeError, AttributeError):
        expected = f"an activation: one of {', '.join(ACTIVATIONS)}, or a torch.nn class name"
        return expected, default, _activation_hint(value)
    return None


def _initializer_problem(value: Any) -> tuple[str, Any, str] | None:
    """An initializer RLlib's ``get_initializer_fn`` does not resolve: what it takes, and the closest
    of torch.nn.init's in-place initializers."""
    from ray.rllib.models.utils import get_initializer_fn

    try:
        get_initializer_fn(value, framework="torch")
    except (ValueError, TypeError, AttributeError):
        import torch

        names = [n for n in dir(torch.nn.init) if n.endswith("_") and not n.startswith("_")]
        hint = did_you_mean(str(value).lower(), names) or did_you_mean(f"{value}_".lower(), names)
        return "the name of an in-place initializer of torch.nn.init", "orthogonal_", hint
    return None


def _is_conv_layer(layer: Any) -> bool:
    """``[out_channels, kernel, stride]`` or ``[out_channels, kernel, stride, padding]`` as RLlib's
    CNN reads it: kernel and stride an integer or ``[height, width]``, padding ``same`` or ``valid``."""

    def side(v: Any) -> bool:
        return _is_size(v) or (isinstance(v, list | tuple) and len(v) == 2 and all(map(_is_size, v)))

    if not isinstance(layer, list | tuple) or len(layer) not in (3, 4):
        return False
    padding_ok = len(layer) == 3 or layer[3] in ("same", "valid")
    return _is_size(layer[0]) and side(layer[1]) and side(layer[2]) and padding_ok


def _check_range(key: str, value: Any, named: str) -> None:
    bounds = RANGES.get(key) or ((0, math.inf, True) if key.startswith("num_") else None)
    if bounds is None or not _is_number(value):
        return
    low, high, inclusive = bounds
    below = value < low if inclusive else value <= low
    if below or value > high:
        allowed = f"{'>=' if inclusive else '>'} {low}" + (f" and <= {high}" if high != math.inf else "")
        raise UserError(f"{named} is {value}, but it must be {allowed}", "")


# ---- metric names ------------------------------------------------------------------------

# Top-level result keys: Tune's own and RLlib's.
TOP_LEVEL = {
    "training_iteration",
    "time_total_s",
    "time_this_iter_s",
    "time_since_restore",
    "iterations_since_restore",
    "timestamp",
    "num_env_steps_sampled_lifetime",
    "num_agent_steps_sampled_lifetime",
    "num_env_steps_trained_lifetime",
    "num_training_step_calls_per_iteration",
}
# First parts of RLlib's nested result keys ("env_runners/episode_return_mean").
NAMESPACES = {
    "env_runners",
    "learners",
    "evaluation",
    "fault_tolerance",
    "timers",
    "replay_buffer",
    "aggregator_actors",
    "env_runner_health",
    "curriculum",
}
# Well-known full names, for "did you mean" suggestions.
COMMON = {
    "env_runners/episode_return_mean",
    "env_runners/episode_return_max",
    "env_runners/episode_return_min",
    "env_runners/episode_len_mean",
    "env_runners/num_episodes_lifetime",
    "env_runners/num_env_steps_sampled_lifetime",
    "env_runners/num_agent_steps_sampled_lifetime",
    progress.AGENT_RETURN,
    "evaluation/env_runners/episode_return_mean",
    "learners/__all_modules__/num_env_steps_trained_lifetime",
}


def metric_leaves() -> set[str]:
    """Every metric name RLlib defines (the last part of a nested result key)."""
    from ray.rllib.utils import metrics

    names = {v for k, v in vars(metrics).items() if k.isupper() and isinstance(v, str)}
    ours = {progress.AGENT_RETURN_MEAN, progress.MODULE_AGENT_RETURN_MEAN, "unity", "task"}
    return names | {"module_episode_returns_mean", "agent_episode_returns_mean"} | ours


def check_metric(name: Any, where: str, what: str) -> tuple[str, bool]:
    """(the 2.60 name, whether RLlib defines it) for a metric a YAML names; unknown ones are errors.

    A name under one of RLlib's result namespaces whose last part is not an
    RLlib metric, and is not close to one either, may be a custom metric: it
    is accepted here and checked once results arrive.
    """
    if not isinstance(name, str) or not name:
        raise UserError(f"{where}: {what} must be a metric name, got {name!r}", "e.g. episode_reward_mean")
    new = legacy.translate_metric(name)
    if new != name:
        notice(f"{what} '{name}' is now '{new}'")
    if new in TOP_LEVEL or new in COMMON:
        return new, True
    parts = new.split("/")
    if parts[0] == environment_parameters.PROGRESS_KEY and len(parts) == 2:
        return new, False  # policy_max_steps' progress (policy_progress/all): checked once results arrive
    leaves = metric_leaves()
    if parts[0] in NAMESPACES and len(parts) > 1:
        if parts[-1] in leaves or any(p in leaves for p in parts[1:-1]):
            return new, True
        near = closest(parts[-1], leaves, n=1)
        if not near:
            return new, False
        fix = "/".join([*parts[:-1], near[0]])
    else:
        candidates = TOP_LEVEL | COMMON | set(legacy.METRICS)
        fix = (closest(new, candidates, n=1) or closest(parts[-1], candidates, n=1) or [""])[0]
    raise UserError(
        f"{where}: unknown metric '{name}' for {what}",
        f"did you mean '{fix}'?" if fix else "see docs/yaml.md for the metric names",
    )


def parse_score_attr(text: Any, where: str) -> tuple[str | None, str]:
    """``checkpoint_score_attr`` (``[min-|max-]metric``, Ray 1.x names too) -> (metric, mode)."""
    if text is None:
        return None, "max"
    if not isinstance(text, str):
        raise UserError(f"{where}: checkpoint_score_attr must be a metric name, got {text!r}", "")
    mode = "min" if text.startswith("min-") else "max"
    bare = text.removeprefix("min-").removeprefix("max-")
    metric, _ = check_metric(bare, where, "checkpoint_score_attr")
    return metric, mode


# Stop metrics that count up from 0: a stop value of 0 or below is met by the first result.
COUNTERS = {
    "training_iteration",
    "time_total_s",
    "num_env_steps_sampled_lifetime",
    "num_agent_steps_sampled_lifetime",
    "num_env_steps_trained_lifetime",
    "env_runners/num_env_steps_sampled_lifetime",
    "env_runners/num_agent_steps_sampled_lifetime",
    "env_runners/num_episodes_lifetime",
}


def check_stop_value(metric: str, value: float, named: str) -> None:
    """A stop value for a counting metric above 0, or a UserError (``named``: how the input named it)."""
    if metric in COUNTERS and value <= 0:
        raise UserError(
            f"{named} is {value:g}, but '{metric}' counts up from 0: the run would stop after one iteration",
            "give a value above 0, or leave this stop out",
        )


def parse_stop(stop: Any, where: str) -> tuple[dict[str, float], set[str]]:
    """A ``stop`` mapping: (metric -> number, names checked and translated; the custom metrics among them)."""
    if stop is None:
        return {}, set()
    if not isinstance(stop, dict):
        raise UserError(
            f"{where}: 'stop' must be a mapping of metric: value", "e.g. stop: {training_iteration: 10}"
        )
    out: dict[str, float] = {}
    custom: set[str] = set()
    for key, value in stop.items():
        line = where_of(stop, key, where)
        metric, known = check_metric(key, line, "stop key")
        if not _is_number(value):
            raise UserError(
                f"{line}: stop value of '{key}' is {value!r}, not a number", f"write e.g. {key}: 100"
            )
        if metric in out:
            raise UserError(
                f"{line}: stop key '{key}' is '{metric}', which this stop mapping has already", ""
            )
        check_stop_value(metric, value, f"{line}: stop value of '{key}'")
        out[metric] = value
        if not known:
            custom.add(metric)
    return out, custom


# ---- search spaces ---------------------------------------------------------------------


def _numbers(op: str, args: list, count: tuple[int, ...], where: str) -> list[float]:
    if len(args) not in count or not all(map(_is_number, args)):
        shape = " or ".join(f"[{', '.join(['x'] * n)}]" for n in count)
        raise UserError(
            f"{where}: '{op}' takes {shape} numbers, got {args!r}", f"write e.g. {op}: [0.001, 0.01]"
        )
    return [float(a) for a in args]


def search_domain(op: str, args: Any, where: str) -> Any:
    """A Tune search space from ``{op: args}``; bad arguments are UserErrors."""
    from ray import tune

    if not isinstance(args, list) or not args:
        raise UserError(f"{where}: '{op}' needs a non-empty list, got {args!r}", f"write {op}: [a, b, ...]")
    if op == "grid_search":
        return tune.grid_search(args)
    if op == "choice":
        return tune.choice(args)
    if op == "randn":
        mean, sd = _numbers(op, args, (2,), where)
        if sd <= 0:
            raise UserError(
                f"{where}: randn's standard deviation must be > 0, got {sd}", "write randn: [mean, sd]"
            )
        return tune.randn(mean, sd)
    quantized = op.startswith("q")
    values = _numbers(op, args, (3,) if quantized else (2,), where)
    low, high = values[0], values[1]
    if low >= high:
        raise UserError(f"{where}: '{op}' needs lower < upper, got [{args[0]}, {args[1]}]", "swap the bounds")
    if "log" in op and low <= 0:
        raise UserError(
            f"{where}: '{op}' needs a lower bound > 0, got {args[0]}", f"write e.g. {op}: [1e-5, 1e-2]"
        )
    if quantized and values[2] <= 0:
        raise UserError(f"{where}: '{op}' needs a step q > 0, got {args[2]}", f"write {op}: [low, high, q]")
    if "randint" in op and not all(isinstance(a, int) for a in args[:2]):
        raise UserError(f"{where}: '{op}' takes integer bounds, got {args!r}", f"write e.g. {op}: [1, 10]")
    return getattr(tune, op)(*args)


SEARCH_SPACES = ("grid_search", "choice", "uniform", "quniform", "loguniform", "qloguniform", "randint",
                 "qrandint", "randn")  # fmt: skip


# ---- schedulers ------------------------------------------------------------------------


def scheduler_classes() -> dict[str, type]:
    from ray.tune import schedulers

    return {
        "asha": schedulers.ASHAScheduler,
        "async_hyperband": schedulers.ASHAScheduler,
        "hyperband": schedulers.HyperBandScheduler,
        "median": schedulers.MedianStoppingRule,
        "median_stopping_rule": schedulers.MedianStoppingRule,
        "pbt": schedulers.PopulationBasedTraining,
        "fifo": schedulers.FIFOScheduler,
    }


def build_scheduler(spec: Any, metric: str, mode: str, where: str) -> Any:
    """A Tune scheduler from the YAML's ``scheduler:`` mapping; every argument checked."""
    if not spec:
        return None
    if not isinstance(spec, dict):
        raise UserError(
            f"{where}: 'scheduler' must be a mapping", "e.g. scheduler: {type: ASHA, grace_period: 5}"
        )
    args = dict(spec)
    kind = str(args.pop("type", "")).lower()
    kinds = scheduler_classes()
    if kind not in kinds:
        raise UserError(f"{where}: unknown scheduler type '{kind}'", f"use one of: {', '.join(kinds)}")
    if kind == "fifo":
        return kinds[kind]()
    cls = kinds[kind]
    accepted = list(inspect.signature(cls).parameters)
    for key in args:
        if key not in accepted:
            raise UserError(
                f"{where}: scheduler '{kind}' has no setting '{key}'",
                did_you_mean(key, accepted) or f"its settings: {', '.join(accepted)}",
            )
    for key in ("metric", "time_attr"):
        if key in args:
            args[key], _ = check_metric(args[key], where, f"scheduler {key}")
    args.setdefault("metric", metric)
    args.setdefault("mode", mode)
    if kind == "pbt":
        mutations = args.get("hyperparam_mutations") or {}
        args["hyperparam_mutations"] = {
            key: search_domain(*next(iter(v.items())), where)
            if isinstance(v, dict) and len(v) == 1 and next(iter(v)) in SEARCH_SPACES
            else v
            for key, v in mutations.items()
        }
    try:
        return cls(**args)
    except (TypeError, ValueError) as err:
        raise UserError(f"{where}: scheduler '{kind}': {err}", "check the scheduler's settings") from err
