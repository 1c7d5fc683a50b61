"""What each stage of :func:`~envsdk.training.build.stages.build_config` produces: one frozen
record per stage, so that a stage's signature says what it needs and what it adds.

One thing is shared and consumed rather than passed on: :attr:`Keys.values`, the ``config:`` keys
not yet placed. Each stage pops the keys it takes (ours, such as ``sampler`` or ``horizon``);
what is left at :func:`~envsdk.training.build.stages.stage_assemble` is RLlib's, and goes to
``AlgorithmConfig.update_from_dict``. :attr:`Keys.search` follows a key that a stage moves
(``train_batch_size`` to ``train_batch_size_per_learner``, ``critic_loss``, ``model:`` keys).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from envsdk.config.own_keys.behavioral_cloning import Cloning
from envsdk.config.own_keys.env_checks import EnvCheckSettings
from envsdk.config.own_keys.environment_parameters import EnvironmentParameters
from envsdk.config.own_keys.reward_signals import SignalPlan
from envsdk.config.own_keys.self_play import SelfPlaySettings
from envsdk.config.yamlio import LineDict
from envsdk.envs.base import RLlibHooks
from envsdk.envs.checker import EnvInfo
from envsdk.envs.registry import ResolvedEnv
from envsdk.substitutions import Stock
from envsdk.training.build.models import ModelSettings


@dataclass(frozen=True)
class Keys:
    """``stage_translate``: the YAML's ``config:`` with the command line's overrides, in RLlib
    2.60's names, its search spaces taken out."""

    raw: LineDict  # as the YAML (and --config) wrote it, with its line numbers
    default_config: AlgorithmConfig  # the algorithm's defaults, which values are checked against
    values: LineDict  # the keys not yet placed (see the module's docstring)
    spelled: dict[str, str]  # 2.60 name -> the name the YAML used
    user_keys: frozenset[str]  # the keys the YAML or --config set, in 2.60 names
    search: dict[tuple[str, ...], Any]  # key path -> Tune domain (its first value stands in values)


@dataclass(frozen=True)
class OwnKeys:
    """``stage_values``: our own blocks, taken out of the values once every value is checked."""

    stock: Stock  # the switch: which substitutions are off (substitutions.py)
    self_play: SelfPlaySettings | None
    env_checks: EnvCheckSettings
    sampler: str  # the `sampler:` key as asked: "batched" or "rllib"
    auto_runners: bool  # num_env_runners: auto, sized once Ray is up
    lessons: EnvironmentParameters | None = None  # environment_parameters, policy_max_steps
    initialize_from: tuple[dict[str, Path], str] = ({}, "")  # policy -> checkpoint, and where it is set
    reward_signals: SignalPlan = field(default_factory=SignalPlan)  # the run's and each policy's
    # policy ("*": every policy) -> its cloning settings (None: none)
    behavioral_cloning: Mapping[str, Cloning | None] = field(default_factory=dict)


@dataclass(frozen=True)
class EnvPlan:
    """``stage_env``: the env to train on (and evaluation's), resolved and wrapped, before any is built."""

    paths: list[Path]  # where the env's, the plugins' and the callbacks' modules are looked up
    resolved: ResolvedEnv
    target: Any  # the env's class or factory (None for a plain gymnasium id)
    hooks: RLlibHooks
    evaluation_env: ResolvedEnv | None  # evaluation_config.env, where it names another env
    evaluation_hooks: RLlibHooks  # its hooks (training's where it has no env of its own)
    env_config: dict[str, Any]


@dataclass(frozen=True)
class StartedEnv:
    """``stage_start_env``: the env the start-up check built, open while the later stages run."""

    env: Any  # None in a dry run that does not start the env (it launches a game)
    info: EnvInfo  # its spaces, agents and first observation (or what is known without building it)
    resolved: ResolvedEnv  # the plan's env, laid out where RLlib would build it bare


@dataclass(frozen=True)
class Networks:
    """``stage_models``: each policy's network, and the policies with their mapping."""

    model: ModelSettings
    multi_agent: dict[str, Any]  # AlgorithmConfig.multi_agent's arguments; empty for one agent
