"""Private RLlib: what configs, env runners, learners and replay buffers keep to themselves."""

from __future__ import annotations

from typing import Any

# ---- RLlib --------------------------------------------------------------------------------------


def is_deprecated_default(value: Any) -> bool:
    """Whether a config default is RLlib's marker for a setting it no longer reads."""
    from ray._common.deprecation import DEPRECATED_VALUE

    return bool(value == DEPRECATED_VALUE)


def env_to_module_connector(config: Any) -> Any:
    """The ``env_to_module_connector`` a config was given (AlgorithmConfig keeps it privately).

    rollout.py swaps the observation filter's for its frozen, raw-keeping form.
    """
    return config._env_to_module_connector


def module_is_stateful(algo: Any) -> bool:
    """Whether an Algorithm's module is recurrent (kept privately by DQN and SAC's setup), which
    rules out transition replay (envsdk.training.substitutes.replay.training_step)."""
    return bool(getattr(algo, "_module_is_stateful", False))


def sample_episodes_with_metrics(
    worker_set: Any, sample_timeout_s: float | None, random_actions: bool = False
) -> tuple[Any, Any]:
    """RLlib's ``synchronous_parallel_sample`` as DQN's and SAC's training steps call it: episodes
    from the new env runners, with their metrics (both through private arguments); with
    ``random_actions``, the runners act at random (its public argument)."""
    from ray.rllib.execution.rollout_ops import synchronous_parallel_sample

    sampled: Any = synchronous_parallel_sample(
        worker_set=worker_set,
        concat=True,
        sample_timeout_s=sample_timeout_s,
        random_actions=random_actions,
        _uses_new_env_runners=True,
        _return_metrics=True,
    )
    return sampled[0], sampled[1]


def catalog_model_config(catalog: Any) -> dict[str, Any]:
    """A Catalog's model config dict (kept privately), read by our SAC catalog's Q encoder."""
    return dict(catalog._model_config_dict)


def sub_env_observations(vector_env: Any) -> list[Any] | None:
    """gymnasium's SyncVectorEnv's per-sub-env observations before it stacks them (kept privately;
    None for other vector envs): the env guard finds which sub-env's observation could not stack."""
    parts = getattr(vector_env, "_env_obs", None)
    return list(parts) if parts is not None else None


def registered_env_creator(name: str) -> Any:
    """The creator Tune's registry holds for an env name (read only by tests)."""
    from ray.tune.registry import ENV_CREATOR, _global_registry

    return _global_registry.get(ENV_CREATOR, name)


def registered_model(name: str) -> Any:
    """The class ``ModelCatalog.register_custom_model(name, cls)`` registered, else None (Ray 1.x
    docs wire a custom ModelV2 that way, often in the env's module)."""
    from ray.tune.registry import RLLIB_MODEL, _global_registry

    if not _global_registry.contains(RLLIB_MODEL, name):
        return None
    return _global_registry.get(RLLIB_MODEL, name)


def time_limit_steps(wrapper: Any) -> int:
    """The limit of a gymnasium ``TimeLimit`` (its spec has none where the env it wraps has no spec)."""
    return int(wrapper._max_episode_steps)


def ray_temp_dir(path: str | None) -> dict[str, Any]:
    """``ray.init``'s keyword for a local Ray's temp folder (a private argument)."""
    return {"_temp_dir": path}


def local_learner(learner_group: Any) -> Any:
    """A local LearnerGroup's Learner (kept privately); tests and benchmarks read its module."""
    return learner_group._learner


def module_lr_schedules(learner: Any, module_id: str) -> list[tuple[str, Any, Any]]:
    """(the metric RLlib logs its lr under, optimizer, its lr Scheduler) of one module's optimizers
    that follow an lr schedule: RLlib's Learner keeps them privately, steps every module's on one
    timestep and logs each lr under ``(module_id, "<optimizer>_learning_rate")``
    (``Learner.after_gradient_based_update``)."""
    out = []
    for name in learner._module_optimizers.get(module_id, ()):
        optimizer = learner._named_optimizers[name]
        schedule = learner._optimizer_lr_schedules.get(optimizer)
        if schedule is not None:
            out.append((f"{name[len(module_id) + 1 :]}_learning_rate", optimizer, schedule))
    return out


def set_optimizer_lr(learner: Any, optimizer: Any, lr: float) -> None:
    """An optimizer's learning rate, as RLlib's Learner sets it from its schedule (a private method)."""
    learner._set_optimizer_lr(optimizer, lr=lr)


def learner_batch(learner: Any, batch: Any) -> Any:
    """A MultiAgentBatch in a Learner's tensors, as its update converts it (a private method)."""
    return learner._convert_batch_type(batch)


# Imported on first use during training: torch._dynamo by the first torch optimizer (seconds),
# tensorboardX by the result log, matplotlib by the reward plot.  train.py imports them while Ray
# starts its processes (the main thread mostly waits then); tests import torch._dynamo first
# (torch's lazy import of it can find torch.ops.prims half-registered once other modules are in).
PRELOAD = ("torch._dynamo", "tensorboardX", "matplotlib.figure", "matplotlib.backends.backend_agg")


def runner_module_to_env(env_runner: Any) -> Any:
    """An EnvRunner's module-to-env connector pipeline (kept privately; None before it is built),
    where the action-input check (envsdk.training.hooks.faults) goes in front of RLlib's GetActions."""
    return getattr(env_runner, "_module_to_env", None)


def runner_env_to_module(env_runner: Any) -> Any:
    """An EnvRunner's env-to-module connector pipeline (kept privately; None before it is built)."""
    return getattr(env_runner, "_env_to_module", None)


def module_to_env_connector(config: Any) -> Any:
    """The ``module_to_env_connector`` a config was given (AlgorithmConfig keeps it privately)."""
    return config._module_to_env_connector


def runner_env(env_runner: Any) -> Any:
    """The env an EnvRunner samples from.  The env guard (envsdk.envs.faults.guard) replaces its
    ``reset``/``step``/``close`` on the instance: RLlib's runners call them as ``self.env.step``."""
    return env_runner.env


def learner_connector_setting(config: Any) -> Any:
    """The ``learner_connector`` a config was given (None: RLlib's default pipeline alone).

    DQN and SAC replay transitions only where the learner would see RLlib's default columns.
    """
    return config._learner_connector


def learner_connector(learner: Any) -> Any:
    """A Learner's connector pipeline (kept privately): what ``normalize_rewards`` learned is read
    there, and reward signals add their pieces to it (next observations, GAE per signal)."""
    return learner._learner_connector


def sac_losses(learner: Any) -> dict[tuple[str, str], Any]:
    """The losses RLlib's SAC learner keeps between ``compute_loss_for_module`` and ``compute_gradients``.

    Keys are ``(module_id, optimizer_name + "_loss")``; ``compute_gradients`` pops each one and
    asserts the dict is empty at its end.  training/substitutes/sac/learner.py sums them for one
    backward pass.
    """
    losses: dict[tuple[str, str], Any] = learner._temp_losses
    return losses


def learner_params(learner: Any) -> dict[Any, Any]:
    """A Learner's parameter dict (param ref -> tensor), the one ``filter_param_dict_for_optimizer``
    takes and ``compute_gradients`` builds its gradient dict from."""
    params: dict[Any, Any] = learner._params
    return params


def update_without_reduce(learner_group: Any, **kwargs: Any) -> None:
    """One ``LearnerGroup.update`` whose metrics the local learner keeps for the next update to reduce.

    ``Learner.update(_no_metrics_reduce=True)`` logs as usual and skips the ``metrics.reduce()``
    that costs a share of every SAC update (benchmarks/replay.py); the next plain update reduces both
    (sums add up, window-1 values keep the last).  Local learner groups only: remote learners'
    sharding does not take the flag.
    """
    assert learner_group.is_local, "update_without_reduce needs a local learner group"
    learner_group.update(_no_metrics_reduce=True, **kwargs)


def _string_keys(tree_: Any) -> Any:
    if not isinstance(tree_, dict):
        return tree_
    return {k if isinstance(k, str) else str(k): _string_keys(v) for k, v in tree_.items()}


def replay_metrics_with_string_agent_ids(buffer: Any) -> None:
    """Make ``buffer.get_metrics()`` key its per-agent metrics by ``str(agent_id)``, as env runners do.

    RLlib 2.60's multi-agent episode buffers log their per-agent counts under the env's agent ids
    as they are, and ``training_step`` adds them to the Algorithm's ``MetricsLogger``, whose
    ``get_state`` joins key paths with ``"--"``: with integer agent ids (0, 1, ...) the first
    checkpoint fails (``TypeError: sequence item 2: expected str instance, int found``).
    Only RLlib's own replay path (a recurrent module, a learner connector of the user's) has them.

    Upstream: RLlib 2.60.0, no upstream issue found (searched 2026-11-28); the per-agent
    metrics came with ray-project/ray PR #49959 "[RLlib] Offpolicy add metrics to multi-agent replay buffers."
    """
    reduce = buffer.get_metrics
    buffer.get_metrics = lambda: _string_keys(reduce())
