"""Ray 1.x names and their Ray 2.60 equivalents.

One table per place a name can appear (algorithm config, stop criteria and
metric names, experiment keys).  The README's legacy-key table is generated
from these dictionaries by ``python -m envsdk legacy-table`` so the two never
drift apart.
"""

from __future__ import annotations

# Algorithm-config keys: old name -> 2.60 name.
CONFIG_KEYS: dict[str, str] = {
    "num_workers": "num_env_runners",
    "num_envs_per_worker": "num_envs_per_env_runner",
    "num_cpus_per_worker": "num_cpus_per_env_runner",
    "num_gpus_per_worker": "num_gpus_per_env_runner",
    "custom_resources_per_worker": "custom_resources_per_env_runner",
    "num_cpus_for_driver": "num_cpus_for_main_process",
    "num_learner_workers": "num_learners",
    "num_gpus_per_learner_worker": "num_gpus_per_learner",
    "num_cpus_per_learner_worker": "num_cpus_per_learner",
    "sgd_minibatch_size": "minibatch_size",
    "num_sgd_iter": "num_epochs",
    "lambda": "lambda_",
    "timesteps_per_iteration": "min_sample_timesteps_per_iteration",
    "min_iter_time_s": "min_time_s_per_iteration",
    "ignore_worker_failures": "ignore_env_runner_failures",
    "recreate_failed_workers": "restart_failed_env_runners",
    "max_num_worker_restarts": "max_num_env_runner_restarts",
    "delay_between_worker_restarts_s": "delay_between_env_runner_restarts_s",
    "evaluation_num_workers": "evaluation_num_env_runners",
    "evaluation_num_episodes": "evaluation_duration",
    "metrics_smoothing_episodes": "metrics_num_episodes_for_smoothing",
    "collect_metrics_timeout": "metrics_episode_collection_timeout_s",
    "learning_starts": "num_steps_sampled_before_learning_starts",
    "env_task_fn": "curriculum",
}

# Config keys that no longer exist, with what to do instead.
REMOVED_CONFIG_KEYS: dict[str, str] = {
    "horizon": "limit episode length in the env (gymnasium TimeLimit / max_episode_steps)",
    "soft_horizon": "end episodes in the env and return truncated=True",
    "no_done_at_end": "return truncated=True instead of terminated=True from the env",
    "monitor": "record videos after training with `rollout.py CKPT --video DIR`",
    "record_env": "record videos after training with `rollout.py CKPT --video DIR`",
    "num_gpus_per_learner_worker_fractional": "use num_gpus_per_learner",
}

# Result metrics (stop criteria, checkpoint_score_attr): old name -> 2.60 name.
METRICS: dict[str, str] = {
    "timesteps_total": "num_env_steps_sampled_lifetime",
    "episodes_total": "env_runners/num_episodes_lifetime",
    "episode_reward_mean": "env_runners/episode_return_mean",
    "episode_reward_max": "env_runners/episode_return_max",
    "episode_reward_min": "env_runners/episode_return_min",
    "episode_len_mean": "env_runners/episode_len_mean",
    "sampler_results/episode_reward_mean": "env_runners/episode_return_mean",
    "evaluation/episode_reward_mean": "evaluation/env_runners/episode_return_mean",
}

# Experiment-level keys (beside `config`): old name -> current name.
EXPERIMENT_KEYS: dict[str, str] = {
    "local_dir": "storage_path",
}

# Experiment-level keys Ray 1.x accepted that we ignore, with the reason.
IGNORED_EXPERIMENT_KEYS: dict[str, str] = {
    "resources_per_trial": "RLlib 2.60 derives trial resources from num_env_runners/num_gpus",
    "sync_config": "results are written to storage_path directly",
    "loggers": "CSV, JSON and TensorBoard results are always written",
}


def translate_metric(name: str) -> str:
    """An old metric name -> its 2.60 name (others unchanged); a ``min-``/``max-`` prefix is
    parsed by :func:`envsdk.validation.parse_score_attr`."""
    return METRICS.get(name, name)


def legacy_table_markdown() -> str:
    """The README table of renamed and removed keys."""
    rows = ["| Ray 1.x | Ray 2.60 / this tool | where |", "|---|---|---|"]
    rows += [f"| `{old}` | `{new}` | config |" for old, new in CONFIG_KEYS.items()]
    rows += [f"| `{old}` | `{new}` | stop, checkpoint_score_attr |" for old, new in METRICS.items()]
    rows += [f"| `{old}` | `{new}` | experiment |" for old, new in EXPERIMENT_KEYS.items()]
    rows += [f"| `{old}` | removed: {why} | config |" for old, why in REMOVED_CONFIG_KEYS.items()]
    return "\n".join(rows)
