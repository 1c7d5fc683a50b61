"""What the stages of :func:`~envsdk.training.build.stages.build_config` know so far."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envsdk.config.env_checks import EnvCheckSettings
from envsdk.config.experiment import Experiment
from envsdk.config.self_play import SelfPlaySettings
from envsdk.config.yamlio import LineDict
from envsdk.envs.registry import ResolvedEnv


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
    model: Any = None  # ModelSettings (models.py)
    multi_agent: dict[str, Any] = field(default_factory=dict)
    config: Any = None  # the AlgorithmConfig
    models: list[str] = field(default_factory=list)
    sampler: str = "batched"  # the `sampler:` key; then what the env runners use (see stage_sampler)
    off: set[str] = field(default_factory=set)  # substitutions turned off (substitutions.py)
