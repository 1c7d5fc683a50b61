"""The stages of a build, in order: translate, values, env, start-up check, models, assemble,
hooks, sampler, module check, finish.  Each reads and adds to the :class:`Build` record."""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner

from envsdk import speedups, substitutions
from envsdk.config import offline
from envsdk.config.env_checks import EnvCheckSettings
from envsdk.config.experiment import Experiment, record
from envsdk.config.self_play import SelfPlaySettings
from envsdk.config.yamlio import LineDict, merge
from envsdk.envs.base import hooks
from envsdk.envs.checker import preflight, unbuilt
from envsdk.envs.curriculum import apply_curriculum
from envsdk.envs.default_models.choice import check_modules
from envsdk.envs.imports import import_ref
from envsdk.envs.plugins import plugin_name, search_path
from envsdk.envs.registry import EnvWrappers, resolve_env
from envsdk.errors import UserError
from envsdk.notices import notice, quiet_rllib
from envsdk.training import (
    agent_metrics,
    batched_runner,
    env_setup,
    episode_window,
    guards,
    off_policy,
    self_play,
)
from envsdk.training.build.built import BuiltConfig, algorithm_class
from envsdk.training.build.models import model_settings
from envsdk.training.build.multi_agent import multi_agent_settings, policy_of, set_up_self_play
from envsdk.training.build.record import Build
from envsdk.training.build.rules import (
    atari_preprocessing,
    check_vectorize_mode,
    fit_replay_buffer,
    has_continuous_actions,
    new_stack_settings,
    per_learner_batch,
    start_tries,
    take_critic_loss,
    with_horizon,
)
from envsdk.training.build.translate import (
    check_values,
    evaluation_settings,
    extract_search_spaces,
    resolve_callbacks,
    translate,
    valid_keys,
)
from envsdk.training.callbacks import add_callback
from envsdk.training.sac_learner import SACTorchLearner


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
    b.search = extract_search_spaces(b.values, b.values.where)


def stage_values(b: Build) -> None:
    """Every value checked (evaluation_config's too), callbacks imported, our own blocks parsed."""
    values = b.values
    defaults = b.default_config.to_dict()
    b.off = substitutions.off_in_environment() | substitutions.off_in_config(
        values.pop(substitutions.KEY, None), values.where(substitutions.KEY)
    )
    check_values(values, defaults, b.search, b.spelled)
    per_learner_batch(b, defaults)
    take_critic_loss(b)
    if values.get("evaluation_config"):
        evaluation = evaluation_settings(values, values.lines.get("evaluation_config", 0))
        for key in ("model", "model_config"):
            if key in evaluation:  # RLlib: ignored (model) or an AttributeError at build (model_config)
                raise UserError(
                    f"{evaluation.where(key)}: evaluation_config.{key}: evaluation runs the trained"
                    " network, so its settings are training's",
                    f"remove it (set the network under config.{key})",
                )
        check_values(evaluation, defaults, {}, {})
        values["evaluation_config"] = dict(evaluation)
    resolve_callbacks(values, [b.exp.base_dir])
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


def stage_env(b: Build) -> None:
    """The env (and evaluation's) resolved, wrapped as config keys ask, its env_config prepared."""
    values = b.values
    values.pop("env", None)  # merged into exp.env (experiment.py, then --env / --config.env)
    b.paths = [b.exp.base_dir]
    resolved = resolve_env(b.exp.env, b.paths)
    atari_settings = atari_preprocessing(values, resolved)
    resolved, horizon = with_horizon(values, resolved)
    dropped = tuple(str(k) for k in values.pop("drop_observation_keys", None) or ())  # MiniGrid's mission
    b.resolved = resolved.wrapped(EnvWrappers(dropped, atari_settings))
    check_vectorize_mode(values, b.resolved)
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


@contextlib.contextmanager
def stage_start_env(b: Build) -> Iterator[None]:
    """The start-up check: the env built, reset, stepped and checked (:func:`preflight`), and kept
    open while the later stages build networks on its first observation."""
    skip = b.dry_run and not b.env_hooks.build_in_dry_run
    started = (
        contextlib.nullcontext((None, unbuilt(b.target)))
        if skip
        else preflight(b.resolved, b.env_config, b.env_checks.observation_bounds, start_tries(b.values))
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
    b.model = model_settings(
        values, b.info, b.algo_class, b.exp.run, search_path(b.exp.base_dir), b.raw.where("model"), b.search
    )
    b.multi_agent = multi_agent_settings(values, b.info, b.paths)
    values.setdefault("log_level", "ERROR")
    # The preflight above is the env check (with only allowed actions where there is a mask);
    # RLlib's own multi-agent checker steps with random actions, masked ones included.
    values.setdefault("disable_env_checking", True)
    for key, value in b.env_hooks.config_defaults.items():
        values.setdefault(key, value)  # the env's own defaults; the YAML wins
    if not has_continuous_actions(b.info):
        # Nothing to unsquash or clip, but RLlib's connector would still copy and
        # walk every action it sends to the env, at every step.
        values.setdefault("normalize_actions", False)
        values.setdefault("clip_actions", False)


def _api_stack(b: Build, config: AlgorithmConfig) -> None:
    """The old API stack for a ModelV2 plugin; the new stack's settings otherwise."""
    values, model = b.values, b.model
    if not model.old_stack:
        new_stack_settings(values, config, b.info.multi_agent)
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
        fit_replay_buffer(config, b.default_config, values)
        if b.self_play is not None:
            set_up_self_play(
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
    if speedups.wanted(set(patches_off)):  # a patch to install in each env runner's process
        hook = (
            functools.partial(speedups.on_env_runner, off=patches_off)
            if patches_off
            else speedups.on_env_runner
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
        found = check_modules(b.config, b.env, b.info.first_obs, policy_of(b.config, b.info), b.model.plugin)
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
