"""Rules of one algorithm, API stack or env kind: replay buffers, SAC's batch, our learners'
settings, the new stack's settings, reward normalization, Atari, ``horizon``, the start-up check's
tries."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.algorithms.ppo.torch.ppo_torch_learner import PPOTorchLearner as RLlibPPOTorchLearner
from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner as RLlibSACTorchLearner

from envsdk import internals, substitutions
from envsdk.config.yamlio import LineDict
from envsdk.envs.adapters import atari
from envsdk.envs.adapters.atari import AtariSettings
from envsdk.envs.checker import EnvInfo
from envsdk.envs.registry import ResolvedEnv
from envsdk.errors import UserError
from envsdk.notices import notice
from envsdk.substitutions import BATCHED_SAMPLER, PPO_LEARNER, SAC_LEARNER, TRANSITION_REPLAY, Stock
from envsdk.training.build.translate import search_candidates
from envsdk.training.hooks import observation_filter, reward_normalization
from envsdk.training.substitutes.ppo.learner import (
    ADVANTAGE_NORMALIZATION,
    ADVANTAGE_NORMALIZATIONS,
    CLIP_SCHEDULE,
)
from envsdk.training.substitutes.replay import training_step
from envsdk.training.substitutes.replay.training_step import RANDOM_STEPS
from envsdk.training.substitutes.sac.learner import CRITIC_LOSS, CRITIC_LOSSES


def new_stack_settings(values: LineDict, config: AlgorithmConfig, multi_agent: bool) -> None:
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


def fit_replay_buffer(config: AlgorithmConfig, default_config: AlgorithmConfig, values: LineDict) -> None:
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
    """``normalize_rewards: true``: :mod:`envsdk.training.hooks.reward_normalization`'s learner piece."""
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


def atari_preprocessing(values: LineDict, resolved: ResolvedEnv) -> AtariSettings | None:
    """The standard preprocessing for an Atari env unless ``atari_preprocessing: false``
    (:mod:`envsdk.envs.adapters.atari`); Ray 1.x's ``model: {dim, grayscale, framestack}`` size it."""
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


def check_vectorize_mode(values: LineDict, resolved: ResolvedEnv) -> None:
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
            "drop the key (the envs step one by one, 'sync', or each in a process where the start-up"
            " check finds a costly step), or set 'sync' or 'async' (each env in a process)",
        )


def has_continuous_actions(info: EnvInfo) -> bool:
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


def per_learner_batch(values: LineDict, search: dict[tuple, Any], run: str, defaults: dict[str, Any]) -> None:
    """``train_batch_size`` for an algorithm whose RLlib 2.60 config reads only
    ``train_batch_size_per_learner`` (its defaults set that one: SAC, CQL), where the YAML's
    value would go unused without a word: it moves there (a search space too), with a notice.
    Where RLlib derives the per-learner size from ``train_batch_size`` (PPO, DQN, ...), it stays."""
    if "train_batch_size" not in values or "train_batch_size_per_learner" in values:
        return
    if internals.per_learner_batch_unset(defaults):
        return
    if (values.get("num_learners") or defaults.get("num_learners") or 0) > 1:
        raise UserError(
            f"{values.where('train_batch_size')}: {run} on RLlib 2.60 reads only"
            " train_batch_size_per_learner, and this config has several learners",
            "set train_batch_size_per_learner: the batch each learner updates on",
        )
    values["train_batch_size_per_learner"] = values.pop("train_batch_size")
    if ("train_batch_size",) in search:
        search[("train_batch_size_per_learner",)] = search.pop(("train_batch_size",))
    notice(
        f"config key 'train_batch_size' is 'train_batch_size_per_learner' for {run}:"
        " RLlib 2.60 reads only that one"
    )


@dataclass(frozen=True)
class LearnerChoice:
    """A setting of one of our learners, which it reads from RLlib's ``learner_config_dict``."""

    key: str
    choices: tuple[str, ...]  # the first is what RLlib's own learner does
    algorithm: str  # whose learner (run:)
    rllib_learner: type  # RLlib's learner class that ours replaces
    substitution: str  # the substitution that puts ours in its place
    use: str  # the fix line for a value not among the choices
    rllib_has: str  # what RLlib's own learner does instead


LEARNER_CHOICES = (
    LearnerChoice(
        CRITIC_LOSS, CRITIC_LOSSES, "SAC", RLlibSACTorchLearner, SAC_LEARNER,
        "use 'squared' (the SAC paper's and SB3's) or 'huber' (RLlib's, the default)", "the huber loss only",
    ),
    LearnerChoice(
        ADVANTAGE_NORMALIZATION, ADVANTAGE_NORMALIZATIONS, "PPO", RLlibPPOTorchLearner, PPO_LEARNER,
        "use 'minibatch' (SB3's and CleanRL's) or 'batch' (RLlib's, the default)",
        "the whole train batch's normalization only",
    ),
)  # fmt: skip


def take_random_steps(values: LineDict, run: str, default_config: AlgorithmConfig, stock: Stock) -> None:
    """``random_steps: N``: the first N steps sampled (env steps, or agent steps with
    ``count_steps_by: agent_steps``) act uniformly at random, as SB3's ``learning_starts`` and Ray
    1.x's ``exploration_config: {random_timesteps: N}`` do; DQN and SAC, whose training step is
    envsdk's transition replay, drawing through the batched sampler (``training_step.RANDOM_STEPS``
    in ``learner_config_dict``; :func:`check_random_steps_sampler` checks the sampler)."""
    if RANDOM_STEPS not in values:
        return
    where = values.where(RANDOM_STEPS)
    steps = values.pop(RANDOM_STEPS)
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise UserError(
            f"{where}: random_steps must be a whole number of steps, 0 or more, got {steps!r}",
            "for example random_steps: 10000 (RL Zoo's learning_starts for SAC on HalfCheetah)",
        )
    if not steps:
        return
    if default_config.algo_class not in training_step.REPLACEMENTS:
        raise UserError(
            f"{where}: random_steps is a warm-up of DQN's and SAC's training step; {run} acts with its"
            " policy from the first step",
            "remove random_steps (or train with run: SAC or run: DQN)",
        )
    for name in (TRANSITION_REPLAY, BATCHED_SAMPLER):
        if not stock.on(name):
            raise UserError(
                f"{where}: random_steps is taken by envsdk's {name}, which stock: (or"
                f" {substitutions.STOCK}) turns off; RLlib 2.60's {run} never acts at random",
                f"remove random_steps, or keep the {name} substitution on",
            )
    values["learner_config_dict"] = {**(values.get("learner_config_dict") or {}), RANDOM_STEPS: steps}


def check_random_steps_sampler(config: AlgorithmConfig, sampler: str) -> None:
    """``random_steps`` needs the batched sampler (RLlib's loop draws the env's space, not the policy's)."""
    if config.learner_config_dict.get(RANDOM_STEPS) and sampler != "batched":
        raise UserError(
            f"random_steps: the warm-up's random actions are drawn by envsdk's batched sampler, and this"
            f" config samples with {sampler}",
            "remove random_steps (a multi-agent env, a recurrent model or an env-to-module connector keeps"
            " RLlib's loop)",
        )


def take_clip_schedule(values: LineDict, run: str, default_config: AlgorithmConfig, stock: Stock) -> None:
    """``clip_param: [[timestep, value], ...]`` (PPO): the clip our PPO learner reads at each timestep
    (:data:`CLIP_SCHEDULE`); RLlib's own learner keeps ``clip_param`` constant."""
    schedule = values.get("clip_param")
    if not isinstance(schedule, list | tuple):
        return
    where = values.where("clip_param")
    if not issubclass(default_config.learner_class, RLlibPPOTorchLearner) or "learner_class" in values:
        raise UserError(
            f"{where}: clip_param is a schedule, which only envsdk's PPO learner reads"
            f" ({run} keeps it constant)",
            "give clip_param one number",
        )
    if not stock.on(PPO_LEARNER):
        raise UserError(
            f"{where}: a clip_param schedule is read by envsdk's PPO learner, which stock: (or"
            f" {substitutions.STOCK}) turns off; RLlib's own learner keeps clip_param constant",
            f"give clip_param one number (an mlagents-learn config: epsilon_schedule: constant), or keep"
            f" the {PPO_LEARNER} substitution on",
        )
    values["clip_param"] = float(schedule[0][1])
    values["learner_config_dict"] = {**(values.get("learner_config_dict") or {}), CLIP_SCHEDULE: schedule}


def fragment_length(horizon: int, batch: int) -> int:
    """The longest fragment up to ``horizon`` whose multiples come within 10% of ``batch`` above it
    (RLlib's ``validate_train_batch_size_vs_rollout_fragment_length``)."""
    for length in range(min(horizon, batch), 0, -1):
        if math.ceil(batch / length) * length - batch <= 0.1 * batch:
            return length
    return 1


def time_horizon(values: LineDict, agents: int, default_batch: int) -> None:
    """``time_horizon: N`` (mlagents-learn's): each agent's trajectory is cut every N of its own steps
    and bootstrapped.  RLlib cuts every episode when a sample reaches ``rollout_fragment_length``, which
    counts every agent's steps under ``count_steps_by: agent_steps``: N x ``agents`` (those that act in
    one step of the env there, else 1), brought within RLlib's 10% of the train batch per env runner."""
    horizon = values.pop("time_horizon", None)
    if horizon is None:
        return
    where = values.where("time_horizon")
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise UserError(f"{where}: time_horizon must be a positive integer, got {horizon!r}", "")
    if "rollout_fragment_length" in values:
        raise UserError(f"{where}: time_horizon and rollout_fragment_length both set", "keep one of them")
    per_step = agents
    copies = max(1, int(values.get("num_env_runners") or 0)) * int(values.get("num_envs_per_env_runner") or 1)
    batch = int(values.get("train_batch_size") or default_batch) // copies
    fragment = fragment_length(horizon * per_step, max(1, batch))
    values["rollout_fragment_length"] = fragment
    if fragment != horizon * per_step:
        notice(
            f"time_horizon {horizon} x {per_step} agents runs as rollout_fragment_length {fragment}: RLlib"
            " asks the train batch per env runner to be within 10% of a multiple of it"
        )


def take_learner_choices(
    values: LineDict, search: dict[tuple, Any], run: str, default_config: AlgorithmConfig, stock: Stock
) -> None:
    """:data:`LEARNER_CHOICES` (``critic_loss``, ``advantage_normalization``; search spaces too)
    moved into ``learner_config_dict``.  ``stock``: the switch (which substitutions are off)."""
    for choice in LEARNER_CHOICES:
        if choice.key in values:
            _take_choice(choice, values, search, run, default_config, stock)


def _take_choice(
    choice: LearnerChoice,
    values: LineDict,
    search: dict[tuple, Any],
    run: str,
    default_config: AlgorithmConfig,
    stock: Stock,
) -> None:
    key, where = choice.key, values.where(choice.key)
    domain = search.pop((key,), None)
    value = values.pop(key)
    asked = search_candidates(domain) if domain is not None else [value]
    for candidate in asked:
        if candidate not in choice.choices:
            raise UserError(
                f"{where}: {key} must be one of {', '.join(choice.choices)}, got {candidate!r}", choice.use
            )
    old_stack = values.get("enable_rl_module_and_learner") is False
    if old_stack or "learner_class" in values or default_config.learner_class is not choice.rllib_learner:
        raise UserError(
            f"{where}: {key} is a setting of RLlib's {choice.algorithm} learner on the new API stack,"
            f" which this {run} config does not train with",
            f"remove {key} (or train with run: {choice.algorithm} and RLlib's {choice.algorithm} learner)",
        )
    if not stock.on(choice.substitution) and asked != [choice.choices[0]]:
        raise UserError(
            f"{where}: {key} {value!r} is computed by envsdk's {choice.algorithm} learner, which stock: (or"
            f" {substitutions.STOCK}) turns off; RLlib's own learner has {choice.rllib_has}",
            f"use {key}: {choice.choices[0]} (RLlib's), or keep the {choice.substitution} substitution on",
        )
    values["learner_config_dict"] = {**(values.get("learner_config_dict") or {}), key: value}
    if domain is not None:
        search[("learner_config_dict", key)] = domain


def with_horizon(values: LineDict, resolved: ResolvedEnv) -> tuple[ResolvedEnv, int | None]:
    """Ray 1.x ``horizon``: episodes cut after N steps (a gymnasium TimeLimit)."""
    horizon = values.pop("horizon", None)
    if horizon is None:
        return resolved, None
    if not isinstance(horizon, int) or isinstance(horizon, bool) or horizon < 1:
        raise UserError(f"{values.where('horizon')}: horizon must be a positive integer, got {horizon!r}", "")
    notice(f"config key 'horizon' is a time limit of {horizon} steps on the env")
    return resolved.with_time_limit(horizon), horizon


START_TRIES = 3  # envs built for the start-up check where the YAML asks RLlib to recreate failing ones


def start_tries(values: Any) -> int:
    """How many envs the start-up check may build: a run that asks RLlib to recreate failing envs
    or runners trains on an env that fails now and then, so its first step may fail too."""
    asked = values.get("restart_failed_sub_environments") or values.get("restart_failed_env_runners")
    return START_TRIES if asked else 1
