"""The stages of a build, in order: translate, values, env, start-up check, models, parallel envs,
assemble, hooks, sampler, module check, finish.  Each takes the records of the stages before it that it
reads, and returns its own (:mod:`envsdk.training.build.parts`)."""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner as RLlibDQNTorchLearner
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner as RLlibPPOTorchLearner
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID

from envsdk import speedups, substitutions
from envsdk.config import offline
from envsdk.config.experiment import Experiment, record
from envsdk.config.own_keys import behavioral_cloning
from envsdk.config.own_keys import reward_signals as reward_signals_key
from envsdk.config.own_keys.env_checks import EnvCheckSettings
from envsdk.config.own_keys.self_play import SelfPlaySettings
from envsdk.config.unread import unread_on_new_stack
from envsdk.config.yamlio import LineDict, merge
from envsdk.envs.base import hooks
from envsdk.envs.checker import preflight, unbuilt
from envsdk.envs.curriculum import apply_curriculum
from envsdk.envs.registry import EnvWrappers, resolve_env
from envsdk.errors import UserError
from envsdk.networks.choice import check_modules
from envsdk.networks.plugins import plugin_name, search_path
from envsdk.notices import notice, quiet_rllib
from envsdk.training.build import env_setup, lessons
from envsdk.training.build.built import BuiltConfig, algorithm_class
from envsdk.training.build.callables import Reported, resolve_callables
from envsdk.training.build.models import ModelSettings, model_settings
from envsdk.training.build.modules import poca, reward_signals
from envsdk.training.build.multi_agent import multi_agent_settings, policy_of, set_up_self_play
from envsdk.training.build.parts import EnvPlan, Keys, Networks, OwnKeys, StartedEnv
from envsdk.training.build.rules import (
    atari_preprocessing,
    check_random_steps_sampler,
    check_vectorize_mode,
    fit_replay_buffer,
    has_continuous_actions,
    new_stack_settings,
    per_learner_batch,
    start_tries,
    take_clip_schedule,
    take_learner_choices,
    take_random_steps,
    time_horizon,
    with_horizon,
)
from envsdk.training.build.translate import (
    check_values,
    evaluation_settings,
    extract_search_spaces,
    translate,
    valid_keys,
)
from envsdk.training.hooks import (
    agent_metrics,
    agent_step_clock,
    episode_window,
    faults,
    initialize_from,
    self_play,
)
from envsdk.training.hooks.callbacks import add_callback
from envsdk.training.substitutes.dqn.learner import DQNTorchLearner
from envsdk.training.substitutes.impala import learner as impala
from envsdk.training.substitutes.ppo.learner import PPOTorchLearner
from envsdk.training.substitutes.replay import training_step
from envsdk.training.substitutes.sac.learner import SACTorchLearner
from envsdk.training.substitutes.sac.module import lean_sac_module
from envsdk.training.substitutes.sampling import (
    agents_batched,
    batched_runner,
    games_at_once,
    parallel_envs,
    recording,
)

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm import Algorithm


def build_config(
    exp: Experiment, overrides: dict[str, Any] | None = None, dry_run: bool = False
) -> BuiltConfig:
    """Validate ``exp.config`` (plus CLI overrides) and build the AlgorithmConfig, stage by stage.

    ``dry_run``: an env class with ``build_in_dry_run = False`` (it launches a
    game) is not built; its spaces, policies and models stay unknown.
    """
    quiet_rllib()
    algo_class = algorithm_class(exp.run)
    keys = stage_translate(exp, algo_class, overrides or {})
    own = stage_values(exp, keys)
    plan = stage_env(exp, keys, own)
    with stage_start_env(plan, keys.values, own, dry_run) as started:
        stage_evaluation_env(plan, started, keys.values, own)
        networks = stage_models(exp, keys, plan, started)
        offline.check_single_agent(keys.values, exp.run, bool(networks.multi_agent))
        stage_parallel_envs(keys, own, plan, started, networks)
        config = stage_assemble(exp, keys, own, plan, started, networks)
        stage_hooks(config, own, plan, networks, keys.values)
        stage_initialize(config, own, started)
        sampler = stage_sampler(config, own, networks, plan)
        check_random_steps_sampler(config, sampler)
        models = stage_check_modules(config, started, networks)
    return stage_finish(exp, algo_class, config, keys, own, plan, started, sampler=sampler, models=models)


def stage_translate(exp: Experiment, algo_class: type[Algorithm], overrides: dict[str, Any]) -> Keys:
    """The YAML's ``config:`` with the overrides, in RLlib 2.60's names; offline input; search spaces."""
    raw = LineDict(copy.deepcopy(dict(exp.config)))
    raw.lines, raw.source = dict(exp.config.lines), exp.config.source
    merged = merge(dict(raw), overrides)
    for key in overrides:
        raw[key] = merged[key]  # item by item, so that raw keeps its YAML line numbers
    default_config = algo_class.get_default_config()
    values, spelled = translate(
        raw,
        valid_keys(default_config),
        exp.run,
        lenient=exp.translated_from is not None,
        overridden=frozenset(overrides),
    )
    user_keys = frozenset(values)
    offline.prepare(values, exp.run, exp.base_dir)
    search = extract_search_spaces(values, values.where)
    return Keys(raw, default_config, values, spelled, user_keys, search)


def stage_values(exp: Experiment, keys: Keys) -> OwnKeys:
    """Every value checked (evaluation_config's too), callbacks imported, our own blocks taken out."""
    values, search = keys.values, keys.search
    defaults = keys.default_config.to_dict()
    stock = substitutions.Stock.resolve(
        (values.pop(substitutions.KEY, None), values.where(substitutions.KEY))
    )
    check_values(values, defaults, search, keys.spelled)
    per_learner_batch(values, search, exp.run, defaults)
    take_learner_choices(values, search, exp.run, keys.default_config, stock)
    take_clip_schedule(values, exp.run, keys.default_config, stock)
    take_random_steps(values, exp.run, keys.default_config, stock)
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
    resolve_callables(values, [exp.base_dir])
    self_play_value = values.pop("self_play", None)
    self_play_settings = (
        None
        if self_play_value in (None, False)
        else SelfPlaySettings.parse(self_play_value, values.where("self_play"))
    )
    env_checks = EnvCheckSettings.parse(values.pop("env_checks", None), values.where("env_checks"))
    sampler = values.pop("sampler", "batched")
    if sampler not in batched_runner.SAMPLERS:
        raise UserError(
            f"{values.where('sampler')}: sampler must be one of {', '.join(batched_runner.SAMPLERS)},"
            f" got {sampler!r}",
            "use 'batched' (the default: whole-batch sampling) or 'rllib' (RLlib's own env runner loop)",
        )
    auto_runners = values.get("num_env_runners") == "auto"
    if auto_runners:
        values["num_env_runners"] = 0  # sized after Ray starts, from the cluster's CPUs
    parameters = lessons.take(values)
    where = values.where(initialize_from.KEY)
    start_from = (initialize_from.take(values, exp.base_dir), where)
    signals = reward_signals_key.take(values, keys.default_config.gamma, exp.base_dir)
    cloning_where = values.where(behavioral_cloning.KEY)
    default: Any = keys.default_config  # PPO's num_epochs and minibatch_size where it is PPO
    epochs, batch = getattr(default, "num_epochs", 1), getattr(default, "minibatch_size", None) or 128
    cloning = behavioral_cloning.take(values, epochs, batch, exp.base_dir)
    if poca.is_poca(keys.default_config):  # its own refusals, before the other learners' lines
        poca.check_run(stock, signals, cloning, str(keys.raw.source))
    else:
        if signals.given:
            where = values.where(reward_signals_key.KEY)
            taker = reward_signals.check_run(
                reward_signals_key.KEY, exp.run, keys.default_config, stock, where
            )
            if taker != "PPO":  # one value function: the signals' rewards summed
                reward_signals_key.check_one_discount(signals, exp.run, values, keys.default_config)
        if any(cloning.values()):
            reward_signals.check_run(
                behavioral_cloning.KEY, exp.run, keys.default_config, stock, cloning_where
            )
    return OwnKeys(
        stock, self_play_settings, env_checks, sampler, auto_runners, parameters, start_from, signals, cloning
    )


def stage_env(exp: Experiment, keys: Keys, own: OwnKeys) -> EnvPlan:
    """The env (and evaluation's) resolved, wrapped as config keys ask, its env_config prepared;
    the env takes ``environment_parameters``."""
    values = keys.values
    values.pop("env", None)  # merged into exp.env (experiment.py, then --env / --config.env)
    paths = [exp.base_dir]
    resolved = resolve_env(exp.env, paths)
    atari_settings = atari_preprocessing(values, resolved)
    resolved, horizon = with_horizon(values, resolved)
    dropped = tuple(str(k) for k in values.pop("drop_observation_keys", None) or ())  # MiniGrid's mission
    resolved = resolved.wrapped(EnvWrappers(dropped, atari_settings))
    check_vectorize_mode(values, resolved)
    target = env_setup.target(resolved)
    env_hooks = hooks(target)
    evaluation_env = env_setup.evaluation_env(values, paths, horizon)
    evaluation_hooks = env_hooks if evaluation_env is None else hooks(env_setup.target(evaluation_env))
    env_config = env_setup.prepare_env_configs(  # e.g. Unity's absolute paths
        env_hooks.prepare_env_config,
        evaluation_hooks.prepare_env_config,
        values,
        dict(values.pop("env_config", None) or {}),
        keys.search,
        exp.base_dir,
    )
    env_config = env_hooks.for_algorithm(env_config, exp.run)
    where = values.where(lessons.KEY)
    resolved, env_config = lessons.with_parameters(own.lessons, resolved, target, env_config, where)
    return EnvPlan(paths, resolved, target, env_hooks, evaluation_env, evaluation_hooks, env_config)


@contextlib.contextmanager
def stage_start_env(plan: EnvPlan, values: LineDict, own: OwnKeys, dry_run: bool) -> Iterator[StartedEnv]:
    """The start-up check: the env built, reset, stepped and checked (:func:`preflight`), and kept
    open while the later stages build networks on its first observation."""
    skip = dry_run and not plan.hooks.build_in_dry_run
    started = (
        contextlib.nullcontext((None, unbuilt(plan.target)))
        if skip
        else preflight(plan.resolved, plan.env_config, own.env_checks.observation_bounds, start_tries(values))
    )
    with started as (env, info):
        resolved = plan.resolved
        if env is not None and env_setup.needs_layout(env, resolved):
            resolved = resolved.laid_out()  # RLlib would build it bare, its action mask as features
        env_setup.register(resolved)
        yield StartedEnv(env, info, resolved)


def stage_evaluation_env(plan: EnvPlan, started: StartedEnv, values: LineDict, own: OwnKeys) -> None:
    """evaluation_config.env: its spaces must be training's (checked now, unless it launches a game)."""
    if plan.evaluation_env is None:
        return
    if not plan.evaluation_hooks.build_in_dry_run:
        # Building it launches something (a Unity game): started once more only to check spaces,
        # it would cost a game start before training; its runners check it when they start it.
        notice(f"evaluation_config.env '{plan.evaluation_env.name}' is checked when evaluation starts it")
        return
    own_config = values["evaluation_config"].get("env_config") or {}
    bounds = own.env_checks.observation_bounds
    with preflight(plan.evaluation_env, merge(plan.env_config, own_config), bounds) as (_, evaluation_info):
        where = values.where("evaluation_config")
        env_setup.check_evaluation_spaces(started.info, evaluation_info, where, plan.evaluation_env.name)


def stage_models(exp: Experiment, keys: Keys, plan: EnvPlan, started: StartedEnv) -> Networks:
    """Each policy's network (a plugin or the default model), the policies and their mapping, and
    the defaults that follow from the env."""
    values, info = keys.values, started.info
    model = model_settings(
        values,
        info,
        keys.default_config,
        exp.run,
        search_path(exp.base_dir),
        keys.raw.where("model"),
        keys.search,
    )
    multi_agent = multi_agent_settings(values, info)
    values.setdefault("log_level", "ERROR")
    # The preflight above is the env check (with only allowed actions where there is a mask);
    # RLlib's own multi-agent checker steps with random actions, masked ones included.
    values.setdefault("disable_env_checking", True)
    for key, value in plan.hooks.config_defaults.items():
        values.setdefault(key, value)  # the env's own defaults; the YAML wins
    if not has_continuous_actions(info):
        # Nothing to unsquash or clip, but RLlib's connector would still copy and
        # walk every action it sends to the env, at every step.
        values.setdefault("normalize_actions", False)
        values.setdefault("clip_actions", False)
    return Networks(model, multi_agent)


def stage_parallel_envs(
    keys: Keys, own: OwnKeys, plan: EnvPlan, started: StartedEnv, networks: Networks
) -> None:
    """A costly env's copies step in processes of their own (``gym_env_vectorize_mode: async`` in
    the values) where the choice is the build's and a few more timed steps of the started env say
    it pays (:mod:`envsdk.training.substitutes.sampling.parallel_envs` says when and why)."""
    values = keys.values
    envs = values.get("num_envs_per_env_runner", keys.default_config.num_envs_per_env_runner)
    chosen = parallel_envs.MODE in values or bool(parallel_envs.READS & {path[0] for path in keys.search})
    in_runner_only = (  # the copies must live in the runner's process
        started.env is None
        or started.info.multi_agent
        or networks.model.old_stack
        or own.lessons is not None
        or bool(values.get("curriculum"))
        or not plan.hooks.build_in_dry_run  # a game: its copies count their ports there
    )
    if (
        own.stock.on(substitutions.PARALLEL_ENVS)
        and own.env_checks.parallel_envs == "auto"
        and not (chosen or in_runner_only or own.auto_runners)
        and isinstance(envs, int)
        and envs > 1
        and parallel_envs.costly(
            started.env, started.resolved.name, envs, int(values.get("num_env_runners") or 0)
        )
    ):
        values[parallel_envs.MODE] = "async"


def _api_stack(values: LineDict, config: AlgorithmConfig, model: ModelSettings, multi_agent: bool) -> None:
    """The old API stack for a ModelV2 plugin; the new stack's settings otherwise."""
    if not model.old_stack:
        new_stack_settings(values, config, multi_agent)
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


def stage_assemble(
    exp: Experiment, keys: Keys, own: OwnKeys, plan: EnvPlan, started: StartedEnv, networks: Networks
) -> AlgorithmConfig:
    """The AlgorithmConfig from the values left, the env, the models and the multi-agent settings;
    RLlib's own validation, whose errors name the YAML."""
    values, model = keys.values, networks.model
    config: AlgorithmConfig = keys.default_config.copy(copy_frozen=False)  # the defaults stay as they are
    _api_stack(values, config, model, started.info.multi_agent)
    curriculum = values.pop("curriculum", None)
    by_agents = (networks.multi_agent or {}).get(
        "count_steps_by", values.get("count_steps_by")
    ) == "agent_steps"
    agents = max(1, len(started.info.first_obs)) if by_agents else 1
    time_horizon(values, agents, keys.default_config.train_batch_size)
    try:
        config.update_from_dict(values)
        config.environment(env=started.resolved.name, env_config=plan.env_config)
        if networks.multi_agent:
            config.multi_agent(**networks.multi_agent)
        if model.old_stack:
            config.training(model=model.old_stack_model)
        if model.module_spec is not None:
            config.rl_module(rl_module_spec=model.module_spec)
        if model.model_config:
            config.rl_module(model_config=model.model_config)
        fit_replay_buffer(config, keys.default_config, values)
        if own.self_play is not None:
            env = plan.target or started.env
            info, multi_agent = started.info, networks.multi_agent
            set_up_self_play(config, own.self_play, info, multi_agent, model, env, plan.env_config, values)
        reward_signals.add_signal_modules(
            config, own.reward_signals, model, started.info, keys.raw.where(reward_signals_key.KEY)
        )
        where = keys.raw.where(behavioral_cloning.KEY)
        reward_signals.add_cloning(config, own.behavioral_cloning, started.info, where)
        if poca.is_poca(config):
            poca.add_group_critics(config, started.info, plan.target or started.env, str(keys.raw.source))
        config.validate()
        timeout_given = "sample_timeout_s" in values
        faults.install(config, own.env_checks, values.where("env_checks"), timeout_given, own.stock)
    except (ValueError, TypeError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise UserError(
            f"{keys.raw.source}: RLlib rejected the config: {first}",
            "adjust the named setting in the YAML (or where it is overridden)",
        ) from err
    if curriculum:
        hook = functools.partial(apply_curriculum, ref=str(curriculum), search=[str(p) for p in plan.paths])
        add_callback(config, "on_train_result", hook)
    return config


def stage_hooks(
    config: AlgorithmConfig, own: OwnKeys, plan: EnvPlan, networks: Networks, values: LineDict
) -> None:
    """Our callbacks that ride inside RLlib, beside the user's (the new API stack only), added to
    ``config``."""
    env_hooks = plan.hooks
    for event, hook in env_hooks.env_callbacks.items():
        add_callback(config, event, hook)  # e.g. the Unity env's game stats as metrics
    if networks.model.old_stack:  # the old stack smooths its episode metrics itself, and takes no
        lessons.install(config, own.lessons, plan.target, values.where(lessons.KEY))  # callback functions
        return
    if config.custom_evaluation_function and not isinstance(config.custom_evaluation_function, Reported):
        config.evaluation(custom_evaluation_function=Reported(config.custom_evaluation_function))
    patches_off = own.stock.patches_off()
    if speedups.wanted(own.stock):  # a patch to install in each env runner's process
        hook = (
            functools.partial(speedups.on_env_runner, off=patches_off)
            if patches_off
            else speedups.on_env_runner
        )
        add_callback(config, "on_environment_created", hook, first=True)
    if env_hooks.steps_in_another_process and own.stock.on(substitutions.GAMES_AT_ONCE):
        add_callback(config, "on_environment_created", games_at_once.step_games_at_once, first=True)
    add_callback(config, "on_episode_end", episode_window.log_episode)
    window = episode_window.EpisodeWindow(
        config.metrics_num_episodes_for_smoothing, env_hooks.stable_agent_ids
    )
    add_callback(config, "on_train_result", window, first=True)
    lessons.install(config, own.lessons, plan.target, values.where(lessons.KEY), window)  # after the window
    if config.count_steps_by == "agent_steps" and own.stock.on(substitutions.AGENT_STEP_CLOCK):
        add_callback(config, "on_algorithm_init", agent_step_clock.count_agent_steps)
    if not env_hooks.stable_agent_ids:
        add_callback(config, "on_sample_end", agent_metrics.drop_per_agent_metrics)
        add_callback(config, "on_train_result", agent_metrics.drop_agent_episode_metrics)
    if plan.evaluation_env is not None and plan.evaluation_hooks is not env_hooks:
        given = dict(values.get("evaluation_config") or {})
        env_setup.evaluation_own_hooks(config, env_hooks, plan.evaluation_hooks, given)


def stage_initialize(config: AlgorithmConfig, own: OwnKeys, started: StartedEnv) -> None:
    """``initialize_from``: the policies that start from a checkpoint's weights, checked against the
    run's policies (unknown in a dry run that did not start the env: nothing to load then)."""
    given, where = own.initialize_from
    if not given or (started.env is None and not config.is_multi_agent):
        return
    policies = config.policies if config.is_multi_agent else [DEFAULT_MODULE_ID]
    found = initialize_from.sources(given, policies or (), where)
    # first: self-play's first snapshots (its on_algorithm_init) are then of the loaded weights
    load = functools.partial(initialize_from.load_weights, sources=found)
    add_callback(config, "on_algorithm_init", load, first=True)


def stage_sampler(config: AlgorithmConfig, own: OwnKeys, networks: Networks, plan: EnvPlan) -> str:
    """``sampler:``: single-agent env runners sample with the batched loop
    (:mod:`envsdk.training.substitutes.sampling.batched_runner`), multi-agent ones with the
    agents-batched loop (:mod:`envsdk.training.substitutes.sampling.agents_batched`), unless the
    config needs RLlib's, which a notice names.
    Returns what the env runners use: "batched", "agents-batched", or "rllib (why)"; ``output:``
    records on the single-agent ones (:mod:`envsdk.training.substitutes.sampling.recording`)."""
    recording.prepare(config, one_file=own.stock.on(substitutions.ONE_FILE_PER_WRITE))
    if not config.is_multi_agent and not own.stock.on(substitutions.BATCHED_SAMPLER):
        return f"rllib (stock: {substitutions.BATCHED_SAMPLER} off)"
    if own.sampler == "rllib" or networks.model.old_stack:
        return "rllib"
    if config.env_runner_cls is not None:
        return f"rllib ({config.env_runner_cls.__name__}, the config's env_runner_cls)"
    if config.is_multi_agent:
        if not own.stock.on(substitutions.AGENTS_BATCHED):
            return f"rllib (stock: {substitutions.AGENTS_BATCHED} off)"
        unity = agents_batched.is_unity(plan.target)
        why = agents_batched.why_not_agents_batched(config, own.self_play is not None, unity)
        if why is not None:
            notice(f"sampler: RLlib's env runner loop, as {why}")
            return f"rllib ({why})"
        config.env_runners(env_runner_cls=agents_batched.AgentsBatchedRunner)
        episode = "one agent's life" if unity else "a round, as RLlib's"
        notice(
            f"{substitutions.AGENTS_BATCHED}: each policy acts for all its agents of a step at once;"
            f" an episode is {episode} (ENVSDK_STOCK={substitutions.AGENTS_BATCHED}: RLlib's loop)"
        )
        return "agents-batched"
    why = batched_runner.why_not_batched(config)
    if why is not None:
        notice(f"sampler: RLlib's env runner loop, as {why}")
        return f"rllib ({why})"
    config.env_runners(
        env_runner_cls=recording.RecordingEnvRunner if config.output else batched_runner.BatchedEnvRunner
    )
    return "batched"


def stage_check_modules(config: AlgorithmConfig, started: StartedEnv, networks: Networks) -> list[str]:
    """Each policy's network built and run on the env's first observation; one line per policy."""
    if started.env is None:
        return ["decided when the env starts (a dry run does not start it)"]
    if networks.model.old_stack:
        return []
    info = started.info
    found = check_modules(config, started.env, info.first_obs, policy_of(config, info), networks.model.plugin)
    shown = [m for m in found if not m.startswith(f"{self_play.LEDGER}:") and "@reward_signals:" not in m]
    return [poca.describe_critic(config, m) for m in shown]


# RLlib's own learner class -> the substitution and the class that take its place: SAC's with one
# backward pass where it gives the same gradients, PPO's with the first epoch's minibatches shuffled
# too, DQN's with the config's adam_epsilon in its optimizer, APPO's and IMPALA's with reward_signals.
OUR_LEARNERS: dict[type, tuple[str, type]] = {
    RLlibSACTorchLearner: (substitutions.SAC_LEARNER, SACTorchLearner),
    RLlibPPOTorchLearner: (substitutions.PPO_LEARNER, PPOTorchLearner),
    RLlibDQNTorchLearner: (substitutions.DQN_LEARNER, DQNTorchLearner),
    **{rllib: (substitutions.IMPALA_LEARNER, ours) for rllib, ours in impala.REPLACES.items()},
}


def stage_finish(
    exp: Experiment,
    algo_class: type[Algorithm],
    config: AlgorithmConfig,
    keys: Keys,
    own: OwnKeys,
    plan: EnvPlan,
    started: StartedEnv,
    *,
    sampler: str,
    models: list[str],
) -> BuiltConfig:
    """Our DQN/SAC in place of RLlib's (transition replay, one backward pass, lean module), our PPO
    and DQN learners in place of RLlib's (the first epoch shuffled; adam_epsilon used); the record."""
    if own.stock.on(substitutions.TRANSITION_REPLAY):
        algo_class = training_step.REPLACEMENTS.get(algo_class, algo_class)
    substitution, ours = OUR_LEARNERS.get(config.learner_class, ("", None))
    if ours is not None and own.stock.on(substitution) and config.enable_rl_module_and_learner:
        config.training(learner_class=ours)
    if own.stock.on(substitutions.SAC_MODULE) and config.enable_rl_module_and_learner:
        lean_sac_module(config)
    if config.enable_rl_module_and_learner:
        read_by_learner: frozenset[str] = getattr(config.learner_class, "READS_UNREAD_KEYS", frozenset())
        for key, instead in unread_on_new_stack(algo_class.__name__, keys.user_keys - read_by_learner):
            spelled = keys.spelled.get(key, key)
            name = f"'{key}'" if spelled == key else f"'{key}' (the file's '{spelled}')"
            notice(f"config key {name} is not read on RLlib 2.60's new API stack: {instead}")
    config.algo_class = algo_class
    return BuiltConfig(
        algo_class=algo_class,
        config=config,
        env=started.resolved,
        env_info=started.info,
        search_space=keys.search,
        search_paths=plan.paths,
        auto_runners=own.auto_runners,
        models=models,
        user_keys=set(keys.user_keys),
        sampler=sampler,
        experiment=record(exp, keys.raw),
        stock=own.stock,
    )
