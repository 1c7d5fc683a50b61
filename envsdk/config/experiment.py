"""The tune-experiment YAML format: parse a file into ``Experiment`` records.

Format (as ``rllib train -f`` accepted in Ray 1.x)::

    my-experiment:              # experiment name, one or more per file
      run: PPO                  # algorithm
      env: CartPole-v1          # registered id, gymnasium id or module.Class
      stop: {episode_reward_mean: 475}
      checkpoint_freq: 10
      checkpoint_at_end: true
      keep_checkpoints_num: 3
      checkpoint_score_attr: episode_reward_mean
      num_samples: 1
      scheduler: {type: ASHA, grace_period: 5}
      config: {...}             # algorithm config, see envsdk.training.build

Experiment-level keys are checked here; the ``config`` mapping is checked by
:mod:`envsdk.training.build`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsdk.config import legacy
from envsdk.config.loggers import parse_loggers
from envsdk.config.mlagents.schema import is_trainer_config
from envsdk.config.mlagents.translate import translate
from envsdk.config.mlagents.upgrade import is_pre_1_0, upgrade
from envsdk.config.validation import build_scheduler, parse_score_attr, parse_stop
from envsdk.config.yamlio import LineDict, load_yaml_file
from envsdk.errors import UserError, did_you_mean
from envsdk.notices import notice
from envsdk.progress import RETURN

EXPERIMENT_KEYS = {
    "run",
    "env",
    "stop",
    "config",
    "checkpoint_freq",
    "checkpoint_at_end",
    "keep_checkpoints_num",
    "checkpoint_score_attr",
    "num_samples",
    "storage_path",
    "scheduler",
    "max_failures",
    "loggers",
}


@dataclass
class Experiment:
    """One experiment from a YAML file, with legacy names already translated."""

    name: str
    run: str
    env: Any
    config: LineDict
    stop: dict[str, Any] = field(default_factory=dict)  # 2.60 metric names -> values, checked
    custom_stop: set[str] = field(
        default_factory=set
    )  # stop metrics RLlib does not define (checked in the run)
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = True
    keep_checkpoints_num: int | None = None
    score_metric: str | None = None  # checkpoint_score_attr, parsed: the metric ...
    score_mode: str = "max"  # ... and whether higher ("max") or lower ("min") is better
    num_samples: int = 1
    storage_path: str | None = None
    scheduler: dict[str, Any] | None = None
    max_failures: int = 0
    loggers: dict[str, dict[str, Any]] = field(default_factory=dict)  # wandb/mlflow: their arguments
    source: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    translated_from: str | None = None  # the removed algorithm --translate-algo replaced
    # an mlagents-learn trainer config: what each of its keys became (printed by --dry-run)
    mlagents_keys: list[tuple[str, str]] | None = None

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in this experiment are resolved against."""
        return self.source.parent.resolve() if self.source else Path.cwd()


def load_experiments(
    path: str | Path, mlagents_flags: dict[str, dict[str, Any]] | None = None
) -> list[Experiment]:
    """Read a YAML file holding one or more experiments, or an mlagents-learn trainer config
    (translated by :mod:`envsdk.config.mlagents`, with ``mlagents_flags`` over its settings)."""
    path = Path(path)
    data = load_yaml_file(path)
    said = None
    if is_pre_1_0(data):
        data = upgrade(data)
    if is_trainer_config(data):
        data, said = translate(data, path, mlagents_flags)
    if not isinstance(data, LineDict) or not data:  # the loader reads every mapping as a LineDict
        raise UserError(
            f"{path}: expected a mapping of experiment names to settings",
            "start the file with a line like 'cartpole-ppo:' and indent run/env/config under it",
        )
    experiments = []
    for name, spec in data.items():
        if not isinstance(spec, LineDict):
            raise UserError(
                f"{data.where(name)}: experiment '{name}' must be a mapping",
                "indent run:, env: and config: under the experiment name",
            )
        experiments.append(_parse_experiment(str(name), spec, path))
        experiments[-1].mlagents_keys = said
    return experiments


# Experiment-level keys with a number or flag: (type, lowest allowed value).
NUMBERS: dict[str, tuple[type, int | None]] = {
    "checkpoint_freq": (int, 0),
    "keep_checkpoints_num": (int, 1),
    "num_samples": (int, 1),
    "max_failures": (int, -1),
    "checkpoint_at_end": (bool, None),
}


def _checked(spec: LineDict, key: str) -> Any:
    value = spec.get(key)
    kind, lowest = NUMBERS[key]
    if value is None:
        return None
    fine = isinstance(value, bool) if kind is bool else isinstance(value, int) and not isinstance(value, bool)
    if not fine or (lowest is not None and value < lowest):
        expected = "true or false" if kind is bool else f"an integer >= {lowest}"
        raise UserError(f"{spec.where(key)}: '{key}' is {value!r}, but it takes {expected}", "")
    return value


def _env_of(spec: LineDict, config: LineDict) -> Any:
    """The env: ``env:`` beside ``run:`` or inside ``config:`` (the same value if both)."""
    outer, inner = spec.get("env"), config.get("env")
    if outer is not None and inner is not None and outer != inner:
        raise UserError(
            f"{spec.where('env')}: env '{outer}' here, but '{inner}' at {config.where('env')}",
            "keep one env: line (--env on the command line overrides both)",
        )
    return outer if outer is not None else inner


def _parse_experiment(name: str, spec: LineDict, path: Path) -> Experiment:
    spec = _translate_keys(spec)
    config = spec.get("config") or LineDict()
    if not isinstance(config, dict):
        raise UserError(
            f"{spec.where('config')}: 'config' must be a mapping", "indent the config keys under it"
        )
    if not isinstance(config, LineDict):
        config = LineDict(config)
    config.source = config.source or path
    run = spec.get("run")
    if not run or not isinstance(run, str):
        raise UserError(
            f"{spec.where('run' if run else None)}: experiment '{name}' has no algorithm ('run: {run}')",
            "add 'run: PPO' (or another RLlib algorithm) to the experiment",
        )
    score_metric, score_mode = parse_score_attr(
        spec.get("checkpoint_score_attr"), spec.where("checkpoint_score_attr")
    )
    storage = spec.get("storage_path")
    if storage is not None and not isinstance(storage, str):
        raise UserError(
            f"{spec.where('storage_path')}: 'storage_path' must be a folder path, got {storage!r}", ""
        )
    scheduler = spec.get("scheduler")
    build_scheduler(scheduler, score_metric or RETURN, score_mode, spec.where("scheduler"))  # checks it
    freq = _checked(spec, "checkpoint_freq")
    at_end = _checked(spec, "checkpoint_at_end")
    samples = _checked(spec, "num_samples")
    failures = _checked(spec, "max_failures")
    stop, custom_stop = parse_stop(spec.get("stop"), spec.where("stop"))
    return Experiment(
        name=name,
        run=run,
        env=_env_of(spec, config),
        config=config,
        stop=stop,
        custom_stop=custom_stop,
        checkpoint_freq=freq or 0,
        checkpoint_at_end=True if at_end is None else at_end,
        keep_checkpoints_num=_checked(spec, "keep_checkpoints_num"),
        score_metric=score_metric,
        score_mode=score_mode,
        num_samples=1 if samples is None else samples,
        storage_path=storage,
        scheduler=scheduler,
        max_failures=failures or 0,
        loggers=parse_loggers(spec["loggers"], spec.where("loggers")) if "loggers" in spec else {},
        source=path,
    )


def _translate_keys(spec: LineDict) -> LineDict:
    out = LineDict()
    out.source, out.lines = spec.source, dict(spec.lines)
    for key, value in spec.items():
        if key in legacy.EXPERIMENT_KEYS:
            new = legacy.EXPERIMENT_KEYS[key]
            notice(f"experiment key '{key}' is now '{new}'")
            out[new] = value
            out.lines[new] = spec.lines.get(key, 0)
        elif key in legacy.IGNORED_EXPERIMENT_KEYS:
            notice(f"experiment key '{key}' is ignored: {legacy.IGNORED_EXPERIMENT_KEYS[key]}")
        elif key in EXPERIMENT_KEYS:
            out[key] = value
        else:
            raise UserError(
                f"{spec.where(key)}: unknown experiment key '{key}'",
                did_you_mean(key, EXPERIMENT_KEYS | set(legacy.EXPERIMENT_KEYS))
                or f"valid keys: {', '.join(sorted(EXPERIMENT_KEYS))}",
            )
    return out


def plain(value: Any) -> Any:
    """``value`` with every mapping a plain dict and every sequence a list (JSON's shapes)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def record(exp: Experiment, config: dict[str, Any]) -> dict[str, Any]:
    """What :func:`from_record` needs to build ``exp`` again: its name, algorithm, env and the
    ``config:`` that was built (``config``: the YAML's, with the command line's overrides)."""
    return {
        "name": exp.name,
        "run": exp.run,
        "env": plain(exp.env),
        "config": plain(config),
        "source": str(exp.source.resolve()) if exp.source else None,
        "translated_from": exp.translated_from,
    }


def from_record(doc: dict[str, Any]) -> Experiment:
    """The experiment a checkpoint's manifest recorded (:func:`record`), to build with today's code."""
    source = Path(doc["source"]) if doc.get("source") else None
    config = LineDict(doc.get("config") or {})
    config.source = source
    return Experiment(
        name=str(doc["name"]),
        run=str(doc["run"]),
        env=doc.get("env"),
        config=config,
        source=source,
        translated_from=doc.get("translated_from"),
    )
