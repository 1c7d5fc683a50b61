"""Ray 0.8 / 1.x / early 2.x names and settings, and what they are in Ray 2.60.

One table per kind of translation, so that a reader finds every old name in
one place:

* :data:`CONFIG_KEYS`: config keys renamed, value unchanged;
* :data:`DROPPED_CONFIG_KEYS`: config keys with no 2.60 setting, dropped with
  a notice saying why nothing is lost (or what replaces them);
* :data:`REWRITES`: config keys whose value moves elsewhere in 2.60
  (``framework: tf``, SAC's ``optimization``, ``exploration_config``, ...),
  each a function of the value;
* :data:`METRICS`, :data:`EXPERIMENT_KEYS`, :data:`IGNORED_EXPERIMENT_KEYS`:
  result metrics and experiment-level keys;
* :data:`REMOVED_ALGORITHMS`: algorithms RLlib 2.60 no longer has, with the
  nearest one it has.

Retired gym env ids (``Pendulum-v0``) are mapped in :mod:`envsdk.envs.registry`,
from gymnasium's own registry.  docs/yaml.md's legacy table is generated from
these tables (``python -m envsdk legacy-table``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from envsdk.config.yamlio import LineDict, where_of
from envsdk.errors import UserError
from envsdk.notices import notice

# ---- config keys: renamed ------------------------------------------------------------------

CONFIG_KEYS: dict[str, str] = {
    "num_workers": "num_env_runners",
    "num_rollout_workers": "num_env_runners",
    "num_envs_per_worker": "num_envs_per_env_runner",
    "num_cpus_per_worker": "num_cpus_per_env_runner",
    "num_gpus_per_worker": "num_gpus_per_env_runner",
    "custom_resources_per_worker": "custom_resources_per_env_runner",
    "num_cpus_for_driver": "num_cpus_for_main_process",
    "num_cpus_for_local_worker": "num_cpus_for_main_process",
    "num_learner_workers": "num_learners",
    "num_gpus_per_learner_worker": "num_gpus_per_learner",
    "num_cpus_per_learner_worker": "num_cpus_per_learner",
    "sgd_minibatch_size": "minibatch_size",
    "num_sgd_iter": "num_epochs",
    "lambda": "lambda_",
    "sample_batch_size": "rollout_fragment_length",
    "timesteps_per_iteration": "min_sample_timesteps_per_iteration",
    "min_iter_time_s": "min_time_s_per_iteration",
    "min_time_s_per_reporting": "min_time_s_per_iteration",
    "min_sample_timesteps_per_reporting": "min_sample_timesteps_per_iteration",
    "min_train_timesteps_per_reporting": "min_train_timesteps_per_iteration",
    "ignore_worker_failures": "ignore_env_runner_failures",
    "recreate_failed_workers": "restart_failed_env_runners",
    "recreate_failed_env_runners": "restart_failed_env_runners",
    "max_num_worker_restarts": "max_num_env_runner_restarts",
    "delay_between_worker_restarts_s": "delay_between_env_runner_restarts_s",
    "num_consecutive_worker_failures_tolerance": "num_consecutive_env_runner_failures_tolerance",
    "worker_health_probe_timeout_s": "env_runner_health_probe_timeout_s",
    "worker_restore_timeout_s": "env_runner_restore_timeout_s",
    "validate_workers_after_construction": "validate_env_runners_after_construction",
    "max_requests_in_flight_per_sampler_worker": "max_requests_in_flight_per_env_runner",
    "evaluation_num_workers": "evaluation_num_env_runners",
    "evaluation_num_episodes": "evaluation_duration",
    "metrics_smoothing_episodes": "metrics_num_episodes_for_smoothing",
    "collect_metrics_timeout": "metrics_episode_collection_timeout_s",
    "learning_starts": "num_steps_sampled_before_learning_starts",
    "target_update_frequency": "target_network_update_freq",
    "minibatch_buffer_size": "circular_buffer_num_batches",
    "lr_schedule": "lr",
    "entropy_coeff_schedule": "entropy_coeff",
    "env_task_fn": "curriculum",
}

# ---- config keys: dropped, with why nothing is lost -----------------------------------------

_STACK = "the new API stack is chosen by the model (a ModelV2 plugin selects the old one)"
_TRUNCATED = "gymnasium's truncated flag covers it (an episode cut by a time limit is truncated)"
DROPPED_CONFIG_KEYS: dict[str, str] = {
    "_enable_new_api_stack": _STACK,
    "_enable_learner_api": _STACK,
    "_enable_rl_module_api": _STACK,
    "_disable_execution_plan_api": "2.60 has no execution plans",
    "enable_connectors": "the new API stack always uses connectors",
    "simple_optimizer": "the new API stack's learners replace it",
    "soft_horizon": _TRUNCATED,
    "no_done_at_end": _TRUNCATED,
    "shuffle_sequences": "the new API stack shuffles minibatches itself (shuffle_batch_per_epoch)",
    "vtrace_drop_last_ts": "2.60's V-trace has no such switch",
    "num_accs": "2.60's APPO has no accumulation setting",
    "monitor": "record videos after training with `rollout.py CKPT --video DIR`",
    "record_env": "record videos after training with `rollout.py CKPT --video DIR`",
    "use_state_preprocessor": "2.60's SAC has no state preprocessor",
    "worker_side_prioritization": "2.60's replay buffers prioritize on the learner",
}

# Config keys that no longer exist and cannot be translated safely.
REMOVED_CONFIG_KEYS: dict[str, str] = {
    "num_gpus_per_learner_worker_fractional": "use num_gpus_per_learner",
}


# ---- config keys: values that move ---------------------------------------------------------


@dataclass(frozen=True)
class Context:
    """What a rewrite may depend on."""

    algorithm: str
    valid: frozenset[str]  # 2.60 config keys of the algorithm
    where: str  # file:line of the key, for errors


@dataclass(frozen=True)
class Rewrite:
    """A config key whose value becomes other settings; ``apply`` returns them (and says why)."""

    readme: str  # what happens, for docs/yaml.md's table
    apply: Callable[[Any, Context], tuple[dict[str, Any], str]]


def _framework(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    if value in ("torch", None):
        return {}, ""
    return {}, f"framework '{value}' runs as torch: RLlib 2.60 has only torch (a TF custom model is an error)"


def _use_pytorch(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    return {}, "use_pytorch: RLlib 2.60 always uses torch"


def _sac_learning_rates(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    names = {"actor_learning_rate": "actor_lr", "critic_learning_rate": "critic_lr",
             "entropy_learning_rate": "alpha_lr"}  # fmt: skip
    if not isinstance(value, dict) or set(value) - set(names):
        raise UserError(
            f"{ctx.where}: 'optimization' takes {', '.join(names)}", "or set actor_lr/critic_lr/alpha_lr"
        )
    moved = {names[k]: v for k, v in value.items()}
    return moved, "optimization's learning rates are now " + ", ".join(moved)


def _sac_networks(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    if not isinstance(value, dict):
        raise UserError(
            f"{ctx.where}: Q_model/policy_model must be a mapping", "e.g. {fcnet_hiddens: [256, 256]}"
        )
    kept = {k: v for k, v in value.items() if k in ("fcnet_hiddens", "fcnet_activation")}
    lost = sorted(k for k, v in value.items() if k not in kept and v not in (None, [], {}))
    why = "Q_model/policy_model are one model_config on the new API stack"
    if lost:
        why += f"; {lost} dropped (only fcnet_hiddens and fcnet_activation are kept)"
    return {"model_config": kept}, why


def _prioritized(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    kind = "PrioritizedEpisodeReplayBuffer" if value else "EpisodeReplayBuffer"
    return {
        "replay_buffer_config": {"type": kind}
    }, f"prioritized_replay: {value} is replay_buffer_config type {kind}"


def _buffer_size(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    return {"replay_buffer_config": {"capacity": value}}, "buffer_size is replay_buffer_config capacity"


# Old-stack replay buffer types -> the new stack's episode buffers.
BUFFER_TYPES = {
    "MultiAgentReplayBuffer": "EpisodeReplayBuffer",
    "ReplayBuffer": "EpisodeReplayBuffer",
    "MultiAgentPrioritizedReplayBuffer": "PrioritizedEpisodeReplayBuffer",
    "PrioritizedReplayBuffer": "PrioritizedEpisodeReplayBuffer",
}
BUFFER_KEYS = {"type", "capacity", "alpha", "beta"}


def _replay_buffer(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    if not isinstance(value, dict):
        return {"replay_buffer_config": value}, ""
    kind = value.get("type")
    new = {k: v for k, v in value.items() if k in BUFFER_KEYS}
    if kind in BUFFER_TYPES:
        new["type"] = BUFFER_TYPES[kind]
    dropped = sorted(set(value) - BUFFER_KEYS)
    changed = kind in BUFFER_TYPES or dropped
    why = f"replay_buffer_config: type {new.get('type')}" + (
        f", dropped {', '.join(dropped)}" if dropped else ""
    )
    return {"replay_buffer_config": new}, why if changed else ""


# What each old exploration type's settings become on the new stack (the rest are named as dropped).
EXPLORATION_READ = {
    "EpsilonGreedy": {"initial_epsilon", "final_epsilon", "epsilon_timesteps"},
    "Curiosity": {"eta", "lr", "feature_dim"},
}
# Old settings the new stack has nothing for, and what it does instead.
EXPLORATION_DROPPED = {
    "random_timesteps": "no warm-up of uniformly random actions but DQN's and SAC's (random_steps)",
    # Curiosity's networks and weights are ML-Agents' (envsdk/networks/reward_signals.py)
    "beta": "curiosity weighs its forward loss 0.2 against the inverse one, as ML-Agents (Ray's default)",
    "feature_net_config": "curiosity's encoder is ML-Agents' (network_settings: hidden_units, num_layers)",
    "inverse_net_hiddens": "ML-Agents' inverse model: one layer of 256",
    "inverse_net_activation": "ML-Agents' models use Swish",
    "forward_net_hiddens": "ML-Agents' forward model: one layer of 256",
    "forward_net_activation": "ML-Agents' models use Swish",
    "sub_exploration": "the policy samples its actions",
}


WARMED_UP = ("DQN", "SAC")  # whose random_steps take Ray 1.x's random_timesteps
WARM_UP_KINDS = ("", "StochasticSampling", "EpsilonGreedy")  # exploration the new stack keeps


def _exploration(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    """Old exploration objects -> the closest new-stack setting, or an error naming it."""
    if not isinstance(value, dict) or not value:
        return {}, ""
    kind = str(value.get("type", ""))
    new, why = _exploration_type(kind, value, ctx)
    read = set(EXPLORATION_READ.get(kind, set()))
    if value.get("random_timesteps") and ctx.algorithm in WARMED_UP and kind in WARM_UP_KINDS:
        new["random_steps"] = value["random_timesteps"]
        why += f"; random_timesteps is random_steps: {value['random_timesteps']}"
        read.add("random_timesteps")
    dropped = sorted(set(value) - {"type"} - read)
    if dropped:
        what = [
            f"{key} ({EXPLORATION_DROPPED[key]})" if key in EXPLORATION_DROPPED else key for key in dropped
        ]
        why += f"; dropped {', '.join(what)}"
    return new, why


def _exploration_type(kind: str, value: dict[str, Any], ctx: Context) -> tuple[dict[str, Any], str]:
    if kind == "Curiosity":  # Ray 1.x: reward + eta x 0.5 |forward error|^2, ML-Agents' curiosity too
        curiosity = {"strength": value.get("eta", 1.0), "learning_rate": value.get("lr", 1e-3)}
        curiosity["encoding_size"] = value.get("feature_dim", 288)
        return (
            {"reward_signals": {"extrinsic": {"strength": 1.0}, "curiosity": curiosity}},
            "Curiosity exploration is reward_signals: {extrinsic: {strength: 1}, curiosity: {strength:"
            f" {curiosity['strength']} (eta), learning_rate: {curiosity['learning_rate']} (lr),"
            f" encoding_size: {curiosity['encoding_size']} (feature_dim)}}}}",
        )
    if kind == "EpsilonGreedy":
        start = value.get("initial_epsilon", 1.0)
        end = value.get("final_epsilon", 0.05)
        steps = value.get("epsilon_timesteps", 10000)
        return {
            "epsilon": [[0, start], [steps, end]]
        }, f"EpsilonGreedy exploration is epsilon: [[0, {start}], [{steps}, {end}]]"
    if kind in ("StochasticSampling", ""):
        return {}, f"exploration type '{kind or 'default'}' is what the new API stack does by default"
    if kind == "Random":
        return (
            {},
            "exploration type 'Random' (uniformly random actions) has no new-stack setting: the policy acts",
        )
    if kind == "ParameterNoise" and "noisy" in ctx.valid:
        return {
            "noisy": True
        }, "ParameterNoise exploration: the closest 2.60 setting is noisy: true (NoisyNet, old API stack)"
    raise UserError(
        f"{ctx.where}: exploration_config type '{kind}' has no equivalent on RLlib 2.60's new API stack",
        "drop exploration_config (PPO samples its policy; DQN is epsilon-greedy: set epsilon)",
    )


def _dqn_epsilon_0_8(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    return (
        {},
        "exploration_fraction/exploration_final_eps/schedule_max_timesteps: use epsilon [[t, value], ...]",
    )


def _vtrace(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    if value:
        return {"vtrace": True}, ""
    return {
        "vtrace": True
    }, "vtrace: false is gone from RLlib 2.60: IMPALA and APPO always use V-trace (kept on)"


def _vf_share_layers(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    return {"model_config": {"vf_share_layers": value}}, "vf_share_layers is a model_config setting"


def _fake_gpus(value: Any, ctx: Context) -> tuple[dict[str, Any], str]:
    if not value:
        return {}, ""
    return {
        "_fake_gpus": True
    }, "_fake_gpus: the learner runs on the CPU (like --ray-num-gpus on a machine without GPUs)"


REWRITES: dict[str, Rewrite] = {
    "framework": Rewrite("`tf`, `tf2`, `tfe` run as torch (a TF custom model is an error)", _framework),
    "use_pytorch": Rewrite("torch", _use_pytorch),
    "optimization": Rewrite("SAC: `actor_lr`, `critic_lr`, `alpha_lr`", _sac_learning_rates),
    "Q_model": Rewrite("SAC: `model_config` (fcnet_hiddens, fcnet_activation)", _sac_networks),
    "policy_model": Rewrite("SAC: `model_config` (fcnet_hiddens, fcnet_activation)", _sac_networks),
    "prioritized_replay": Rewrite(
        "`replay_buffer_config: {type: (Prioritized)EpisodeReplayBuffer}`", _prioritized
    ),
    "buffer_size": Rewrite("`replay_buffer_config: {capacity: N}`", _buffer_size),
    "replay_buffer_config": Rewrite(
        "old buffer types become episode buffers; other keys dropped", _replay_buffer
    ),
    "exploration_config": Rewrite(
        "EpsilonGreedy: `epsilon` schedule; Curiosity: `reward_signals` (eta, lr, feature_dim: curiosity's"
        " strength, learning_rate, encoding_size); StochasticSampling and Random: dropped; ParameterNoise:"
        " `noisy: true`; other types are errors; other settings (`random_timesteps`, ...) named as dropped",
        _exploration,
    ),
    "exploration_fraction": Rewrite("dropped (write `epsilon: [[t, value], ...]`)", _dqn_epsilon_0_8),
    "exploration_final_eps": Rewrite("dropped (write `epsilon: [[t, value], ...]`)", _dqn_epsilon_0_8),
    "schedule_max_timesteps": Rewrite("dropped (write `epsilon: [[t, value], ...]`)", _dqn_epsilon_0_8),
    "vtrace": Rewrite("`false`: V-trace stays on (2.60 has no other IMPALA/APPO)", _vtrace),
    "vf_share_layers": Rewrite("`model_config: {vf_share_layers: ...}`", _vf_share_layers),
    "_fake_gpus": Rewrite("the learner runs on the CPU", _fake_gpus),
}

# ---- model options: Ray 1.x ModelV2 `model:` keys on the new API stack's default model ------

# Renamed: the same setting under RLlib 2.60's DefaultModelConfig name.  ModelV2's "post_fcnet"
# layers came after the encoder; the new stack's "head_fcnet" layers do, one stack per head.
MODEL_OPTIONS: dict[str, str] = {
    "fcnet_weights_initializer": "fcnet_kernel_initializer",
    "fcnet_weights_initializer_config": "fcnet_kernel_initializer_kwargs",
    "fcnet_bias_initializer_config": "fcnet_bias_initializer_kwargs",
    "conv_kernel_initializer_config": "conv_kernel_initializer_kwargs",
    "conv_bias_initializer_config": "conv_bias_initializer_kwargs",
    "post_fcnet_hiddens": "head_fcnet_hiddens",
    "post_fcnet_activation": "head_fcnet_activation",
    "post_fcnet_weights_initializer": "head_fcnet_kernel_initializer",
    "post_fcnet_weights_initializer_config": "head_fcnet_kernel_initializer_kwargs",
    "post_fcnet_bias_initializer": "head_fcnet_bias_initializer",
    "post_fcnet_bias_initializer_config": "head_fcnet_bias_initializer_kwargs",
    "lstm_weights_initializer": "lstm_kernel_initializer",
    "lstm_weights_initializer_config": "lstm_kernel_initializer_kwargs",
    "lstm_bias_initializer_config": "lstm_bias_initializer_kwargs",
}

_ATARI = (
    "with an Atari env it sizes atari_preprocessing (the standard Atari preprocessing);"
    " with others, ModelV2 ignored it too"
)
_MODELV2 = "a ModelV2 switch; the new API stack's default model has no such step"
_ATTENTION = "read only with use_attention, which RLlib 2.60's default model does not have"
_DECODER = "read only by ModelV2 decoders; the default model has none"
# Dropped whatever their value, with why nothing changes for the default model.
DROPPED_MODEL_OPTIONS: dict[str, str] = {
    "dim": _ATARI,
    "grayscale": _ATARI,
    "zero_mean": _ATARI,
    "framestack": _ATARI,
    "_time_major": _MODELV2,
    "always_check_shapes": _MODELV2,
    "_use_default_native_models": _MODELV2,
    "_disable_preprocessor_api": "observations reach the new API stack's model as the env gives them",
    "_disable_action_flattening": "the new API stack does not flatten actions",
    "encoder_latent_dim": "the default model's encoder ends in its last fcnet_hiddens layer",
    "conv_transpose_kernel_initializer": _DECODER,
    "conv_transpose_kernel_initializer_config": _DECODER,
    "conv_transpose_bias_initializer": _DECODER,
    "conv_transpose_bias_initializer_config": _DECODER,
    **{f"attention_{k}": _ATTENTION for k in (
        "num_transformer_units", "dim", "num_heads", "head_dim", "memory_inference", "memory_training",
        "position_wise_mlp_dim", "init_gru_gate_bias", "use_n_prev_actions", "use_n_prev_rewards",
    )},
}  # fmt: skip


@dataclass(frozen=True)
class Unsupported:
    """A ModelV2 option the default model cannot honour: ``default`` (ModelV2's) is dropped, any
    other value is an error with ``fix``."""

    default: Any
    fix: str


UNSUPPORTED_MODEL_OPTIONS: dict[str, Unsupported] = {
    "use_attention": Unsupported(False, "use_lstm: true (the default model with memory)"),
    "no_final_linear": Unsupported(False, "drop it (the default model ends in a linear layer)"),
    "custom_action_dist": Unsupported(None, "an RLModule plugin (models/) returns its own distribution"),
    "custom_preprocessor": Unsupported(None, "preprocess in the env (a gymnasium ObservationWrapper)"),
}  # fmt: skip


def translate_model_options(model: dict[str, Any], where: str) -> tuple[LineDict, dict[str, str]]:
    """A Ray 1.x ``model:`` mapping for the new API stack's default model: ModelV2 names renamed,
    options with nothing to do dropped (one notice each), and an option the default model cannot
    honour an error.  Keys keep their lines (``where``: the mapping's, for a ``model`` given on the
    command line).  ``custom_model``/``custom_model_config`` (no plugin named) are left out; other
    keys are returned as they are.

    Returns the mapping and, for each of its keys, the key of ``model`` it came from."""
    out = LineDict()
    lines: dict[Any, int] = getattr(model, "lines", {})
    out.source = getattr(model, "source", None)
    origin: dict[str, str] = {}  # new key -> the key that set it

    for key, value in model.items():
        if key in ("custom_model", "custom_model_config"):
            continue
        here = where_of(model, key, where)
        if key in UNSUPPORTED_MODEL_OPTIONS:
            unsupported = UNSUPPORTED_MODEL_OPTIONS[key]
            if value != unsupported.default:
                raise UserError(
                    f"{here}: model option '{key}' has no equivalent on RLlib 2.60's new API stack",
                    unsupported.fix,
                )
            notice(f"model option '{key}: {value}' dropped: it is ModelV2's default")
            continue
        if key in DROPPED_MODEL_OPTIONS:
            notice(f"model option '{key}' dropped: {DROPPED_MODEL_OPTIONS[key]}")
            continue
        moved = {MODEL_OPTIONS.get(key, key): value}
        if key == "lstm_use_prev_action_reward":
            moved = {"lstm_use_prev_action": value, "lstm_use_prev_reward": value}
        if key not in moved:
            notice(f"model option '{key}' is now {' and '.join(repr(k) for k in moved)}")
        for new_key, new_value in moved.items():
            if new_key in out:
                raise UserError(
                    f"{here}: model option '{key}' sets '{new_key}', "
                    f"which {where_of(model, origin[new_key], where)} sets",
                    "keep one of the two",
                )
            out[new_key], origin[new_key] = new_value, key
            if key in lines:
                out.lines[new_key] = lines[key]
    return out, origin


# ---- result metrics and experiment keys ----------------------------------------------------

METRICS: dict[str, str] = {
    "timesteps_total": "num_env_steps_sampled_lifetime",
    "episodes_total": "env_runners/num_episodes_lifetime",
    "episode_reward_mean": "env_runners/episode_return_mean",
    "episode_reward_max": "env_runners/episode_return_max",
    "episode_reward_min": "env_runners/episode_return_min",
    "episode_len_mean": "env_runners/episode_len_mean",
    "sampler_results/episode_reward_mean": "env_runners/episode_return_mean",
    "evaluation/episode_reward_mean": "evaluation/env_runners/episode_return_mean",
    "evaluation/sampler_results/episode_reward_mean": "evaluation/env_runners/episode_return_mean",
}

EXPERIMENT_KEYS: dict[str, str] = {
    "local_dir": "storage_path",
}

IGNORED_EXPERIMENT_KEYS: dict[str, str] = {
    "resources_per_trial": "RLlib 2.60 derives trial resources from num_env_runners/num_gpus",
    "sync_config": "results are written to storage_path directly",
}

# ---- algorithms ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Replacement:
    algorithm: str | None  # the nearest 2.60 algorithm (None: none is close)
    why: str
    safe: bool  # --translate-algo may run the file with it


REMOVED_ALGORITHMS: dict[str, Replacement] = {
    "A2C": Replacement("PPO", "a synchronous actor-critic; PPO is its clipped successor", True),
    "PG": Replacement("PPO", "vanilla policy gradient; PPO is its clipped successor", True),
    "A3C": Replacement("APPO", "asynchronous actor-critic; APPO samples asynchronously too", True),
    "DDPG": Replacement(
        "SAC", "off-policy continuous control; SAC is its entropy-regularised successor", True
    ),
    "TD3": Replacement("SAC", "off-policy continuous control; SAC has TD3's twin critics", True),
    "APEX_DDPG": Replacement("SAC", "distributed DDPG; SAC with more env runners", True),
    "APEX": Replacement("DQN", "distributed prioritized DQN; DQN with more env runners", True),
    "APEX_DQN": Replacement("DQN", "distributed prioritized DQN; DQN with more env runners", True),
    "SIMPLEQ": Replacement("DQN", "DQN without its extensions", True),
    "R2D2": Replacement("DQN", "recurrent DQN; DQN with use_lstm", False),
    "DDPPO": Replacement("PPO", "decentralized PPO; PPO with num_learners", True),
    "ES": Replacement(
        None, "evolution strategies; no 2.60 algorithm is close (PPO is the usual choice)", False
    ),
    "ARS": Replacement(
        None, "augmented random search; no 2.60 algorithm is close (PPO is the usual choice)", False
    ),
    "CRR": Replacement("CQL", "offline critic-regularised regression; CQL or MARWIL", False),
    "MADDPG": Replacement(
        None, "multi-agent DDPG; no 2.60 algorithm is close (multi-agent PPO or SAC)", False
    ),
    "QMIX": Replacement(None, "value factorization; no 2.60 algorithm is close", False),
    "SLATEQ": Replacement(None, "slate recommendation; no 2.60 algorithm is close", False),
    "ALPHAZERO": Replacement(None, "MCTS self-play; no 2.60 algorithm is close", False),
    "ALPHASTAR": Replacement(None, "league self-play; no 2.60 algorithm is close", False),
    "BANDITLINUCB": Replacement(None, "contextual bandits; no 2.60 algorithm is close", False),
    "BANDITLINTS": Replacement(None, "contextual bandits; no 2.60 algorithm is close", False),
    "DREAMER": Replacement("DreamerV3", "model-based; DreamerV3", False),
    "MAML": Replacement(None, "meta-learning; no 2.60 algorithm is close", False),
    "MBMPO": Replacement(None, "model-based meta-learning; no 2.60 algorithm is close", False),
    "DT": Replacement("MARWIL", "decision transformer (offline); MARWIL or BC", False),
}


def removed_algorithm(name: str) -> Replacement | None:
    return REMOVED_ALGORITHMS.get(name.upper().replace("-", "_"))


def split_learning_rate(values: LineDict, valid: set[str], algorithm: str) -> None:
    """A single ``lr`` -> ``actor_lr`` and ``critic_lr`` (the ones not set) for an algorithm that takes
    a learning rate per network and rejects ``lr`` (SAC, CQL; a DDPG/TD3 file run as SAC)."""
    if "lr" not in values or not {"lr", "actor_lr", "critic_lr"} <= valid:
        return
    for key in ("actor_lr", "critic_lr"):
        values.setdefault(key, values["lr"])
        values.lines.setdefault(key, values.lines.get("lr", 0))
    notice(f"config key 'lr' is actor_lr and critic_lr: {algorithm} in RLlib 2.60 has no single lr")
    del values["lr"]


def translate_metric(name: str) -> str:
    """An old metric name -> its 2.60 name (others unchanged); a ``min-``/``max-`` prefix is
    parsed by :func:`envsdk.config.validation.parse_score_attr`."""
    return METRICS.get(name, name)


def legacy_table_markdown() -> str:
    """docs/yaml.md's table of renamed, dropped and rewritten keys, and removed algorithms."""
    rows = ["| Ray 1.x | Ray 2.60 / this tool | where |", "|---|---|---|"]
    rows += [f"| `{old}` | `{new}` | config |" for old, new in CONFIG_KEYS.items()]
    rows += [f"| `{old}` | {rewrite.readme} | config |" for old, rewrite in REWRITES.items()]
    rows += [f"| `{old}` | dropped: {why} | config |" for old, why in DROPPED_CONFIG_KEYS.items()]
    rows += [
        "| `horizon: N` | the env gets a time limit of N steps (gymnasium TimeLimit; a multi-agent env"
        " truncates every agent) | config |"
    ]
    rows += ["| `num_gpus: N` | `num_gpus_per_learner: N` on the new API stack (kept on the old) | config |"]
    rows += ["| `rollout_fragment_length` < `n_step` | raised to `n_step` (new stack) | config |"]
    rows += ["| `lr` (SAC, CQL) | `actor_lr` and `critic_lr` (2.60 rejects a single `lr` there) | config |"]
    rows += ["| `observation_filter: MeanStdFilter` | an env-to-module connector normalising each float "
             "`Box` part (not masks, not integer images); saved in checkpoints, used by rollout.py, "
             "baked into ONNX | config |"]  # fmt: skip
    rows += [
        "| `input: dataset` + `input_config: {format, paths}` | `input: paths`, read with `read_<format>` "
        "| config |"
    ]
    rows += ["| `input: /tmp/out` (Ray 1.x JSON output) | read as old-stack SampleBatch JSON | config |"]
    rows += [f"| `{old}` | removed: {why} | config |" for old, why in REMOVED_CONFIG_KEYS.items()]
    rows += [f"| `{old}` | `{new}` | model |" for old, new in MODEL_OPTIONS.items()]
    rows += ["| `lstm_use_prev_action_reward` | `lstm_use_prev_action` and `lstm_use_prev_reward` | model |"]
    for why in dict.fromkeys(DROPPED_MODEL_OPTIONS.values()):  # one row per reason
        keys = ", ".join(f"`{k}`" for k, w in DROPPED_MODEL_OPTIONS.items() if w == why)
        rows.append(f"| {keys} | dropped: {why} | model |")
    for old, u in UNSUPPORTED_MODEL_OPTIONS.items():
        default = "null" if u.default is None else str(u.default).lower()
        rows.append(f"| `{old}` | error unless `{default}` (ModelV2's default, dropped): {u.fix} | model |")
    rows += [f"| `{old}` | `{new}` | stop, checkpoint_score_attr |" for old, new in METRICS.items()]
    rows += [f"| `{old}` | `{new}` | experiment |" for old, new in EXPERIMENT_KEYS.items()]
    rows += [f"| `{old}` | ignored: {why} | experiment |" for old, why in IGNORED_EXPERIMENT_KEYS.items()]
    rows += [
        "| `Pendulum-v0`, `FrozenLake-v0`, ... | the newest version of the id in gymnasium's registry | env |"
    ]
    for old, r in REMOVED_ALGORITHMS.items():
        use = f"`{r.algorithm}`" if r.algorithm else "none"
        translate = ", --translate-algo" if r.safe else ""
        rows.append(f"| `run: {old}` | removed ({r.why}); nearest: {use}{translate} | run |")
    return "\n".join(rows)
