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
      config: {...}             # algorithm config, see envsdk.config

Experiment-level keys are checked here; the ``config`` mapping is checked by
:mod:`envsdk.config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsdk import legacy
from envsdk.errors import UserError, did_you_mean
from envsdk.notices import notice
from envsdk.yamlio import LineDict, load_yaml_file

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
}


@dataclass
class Experiment:
    """One experiment from a YAML file, with legacy names already translated."""

    name: str
    run: str
    env: Any
    config: LineDict
    stop: dict[str, Any] = field(default_factory=dict)
    checkpoint_freq: int = 0
    checkpoint_at_end: bool = True
    keep_checkpoints_num: int | None = None
    checkpoint_score_attr: str | None = None
    num_samples: int = 1
    storage_path: str | None = None
    scheduler: dict[str, Any] | None = None
    max_failures: int = 0
    source: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def base_dir(self) -> Path:
        """Folder that relative paths in this experiment are resolved against."""
        return self.source.parent.resolve() if self.source else Path.cwd()


def load_experiments(path: str | Path) -> list[Experiment]:
    """Read a YAML file holding one or more experiments."""
    path = Path(path)
    data = load_yaml_file(path)
    if not isinstance(data, dict) or not data:
        raise UserError(
            f"{path}: expected a mapping of experiment names to settings",
            "start the file with a line like 'cartpole-ppo:' and indent run/env/config under it",
        )
    experiments = []
    for name, spec in data.items():
        if not isinstance(spec, dict):
            raise UserError(
                f"{data.where(name)}: experiment '{name}' must be a mapping",
                "indent run:, env: and config: under the experiment name",
            )
        experiments.append(_parse_experiment(str(name), spec, path))
    return experiments


def _parse_experiment(name: str, spec: LineDict, path: Path) -> Experiment:
    spec = _translate_keys(spec)
    config = spec.get("config") or LineDict()
    if not isinstance(config, dict):
        raise UserError(f"{spec.where('config')}: 'config' must be a mapping", "")
    if not isinstance(config, LineDict):
        config = LineDict(config)
    config.source = config.source or path
    env = spec.get("env", config.get("env"))
    run = spec.get("run")
    if not run:
        raise UserError(
            f"{spec.where(None)}: experiment '{name}' has no 'run' key",
            "add 'run: PPO' (or another RLlib algorithm) to the experiment",
        )
    stop = {legacy.translate_metric(k): v for k, v in (spec.get("stop") or {}).items()}
    for old in spec.get("stop") or {}:
        if legacy.translate_metric(old) != old:
            notice(f"stop key '{old}' is now '{legacy.translate_metric(old)}'")
    score = spec.get("checkpoint_score_attr")
    if score:
        prefix = "min-" if score.startswith("min-") else ""
        bare = score.removeprefix("min-").removeprefix("max-")
        new = legacy.translate_metric(bare)
        if new != bare:
            notice(f"checkpoint_score_attr '{bare}' is now '{new}'")
        score = prefix + new
    return Experiment(
        name=name,
        run=str(run),
        env=env,
        config=config,
        stop=stop,
        checkpoint_freq=int(spec.get("checkpoint_freq", 0) or 0),
        checkpoint_at_end=bool(spec.get("checkpoint_at_end", True)),
        keep_checkpoints_num=spec.get("keep_checkpoints_num"),
        checkpoint_score_attr=score,
        num_samples=int(spec.get("num_samples", 1)),
        storage_path=spec.get("storage_path"),
        scheduler=spec.get("scheduler"),
        max_failures=int(spec.get("max_failures", 0)),
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
