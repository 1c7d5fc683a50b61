"""Faults inside a run, caught where they happen: the env's (stalls, bad observations and
rewards) and the policy's (NaN or infinite outputs, a loss that diverged).

:func:`install` puts on a config

* a :class:`envsdk.envs.faults.guard.Guard` on every env runner's env (``on_environment_created``),
  with the ``env_checks:`` settings (:mod:`envsdk.config.own_keys.env_checks`);
* :class:`GetActions` in place of RLlib's in every module-to-env pipeline (swapped in by
  :func:`arm_action_check`): a policy
  whose action-distribution inputs are NaN or infinite ends the run naming it, instead of
  torch's ``probability tensor contains either inf, nan`` from the sampling;
* :func:`check_learners` (``on_train_result``): an iteration whose learner stats of a policy
  (its loss, its gradient norm) are NaN or infinite ends the run with the policy, the
  iteration and those stats, before the diverged weights sample again.

A runner's fault ends the run through the runner failure path (:mod:`envsdk.training.hooks.restarts`);
:func:`with_learner_stats` adds the last iteration's learner stats to a diverged policy's message.
The old API stack (a ModelV2 plugin) takes no callback functions nor connectors: it gets none.
"""

from __future__ import annotations

import functools
import math
import numbers
import sys
from typing import Any

import torch
import tree
from ray.rllib.connectors.module_to_env import GetActions as RLlibGetActions
from ray.rllib.core.columns import Columns

from envsdk import internals
from envsdk.config.own_keys.env_checks import EnvCheckSettings
from envsdk.envs.faults.guard import MultiAgentGuard, SingleAgentGuard, Site
from envsdk.envs.faults.stall_watch import arm_main_thread
from envsdk.errors import RunFault
from envsdk.substitutions import ACTION_INPUT_CHECK, ENV_GUARD, Stock
from envsdk.training.hooks.callbacks import add_callback, reads_the_episode_only

SMALL_BATCH = 64  # action-distribution inputs up to this size are summed in Python
OUT_OF_BOUNDS = "observations_out_of_bounds"  # counted in env_runners/ with observation_bounds: warn
STATS_SHOWN = ("total_loss", "policy_loss", "vf_loss", "qf_loss", "actor_loss", "critic_loss")


class PolicyDiverged(RunFault):
    """A policy's outputs or learner stats are NaN or infinite."""


def install(
    config: Any, settings: EnvCheckSettings, where: str, sample_timeout_given: bool, stock: Stock
) -> None:
    """Hook the env guard, the action-input check and the learner check into ``config``, but for
    the substitutions ``stock`` turns off (envsdk/substitutions.py: env-guard, action-input-check)."""
    if not config.enable_env_runner_and_connector_v2:
        return
    if stock.on(ENV_GUARD):
        bound = settings.stall_bound(config.sample_timeout_s, where, sample_timeout_given)
        if config.sample_timeout_s and bound > config.sample_timeout_s:
            config.env_runners(sample_timeout_s=bound)  # RLlib waits for a runner as long as the env may take
        guard = functools.partial(guard_env, bounds=settings.observation_bounds, stall_s=bound)
        add_callback(config, "on_environment_created", guard)
    if stock.on(ACTION_INPUT_CHECK):
        add_callback(config, "on_episode_created", arm_action_check)
    add_callback(config, "on_train_result", check_learners)


def env_name(env: Any) -> str:
    return env if isinstance(env, str) else getattr(env, "__name__", type(env).__name__)


def guard_env(*, env_runner: Any, bounds: str, stall_s: float, **_: Any) -> None:
    """``on_environment_created`` hook: guard the env runner's (new) env."""
    runner = int(getattr(env_runner, "worker_index", 0) or 0)
    site = Site(env_name(env_runner.config.env), runner)
    if runner == 0:
        arm_main_thread()
    env = internals.runner_env(env_runner)
    metrics = env_runner.metrics

    def warn(message: str) -> None:
        print(f"warning: {message}", file=sys.stderr, flush=True)

    def count() -> None:
        metrics.log_value(OUT_OF_BOUNDS, 1, reduce="sum")

    cls = MultiAgentGuard if hasattr(env, "single_observation_spaces") else SingleAgentGuard
    cls(env, site, bounds, stall_s, warn, count)


@reads_the_episode_only
def arm_action_check(*, env_runner: Any, **_: Any) -> None:
    """``on_episode_created`` hook: swap RLlib's ``GetActions`` in the runner's module-to-env
    pipeline for :class:`GetActions`, which checks the inputs it samples from, once.  RLlib puts
    custom pieces after ``GetActions`` and builds the pipeline after the env: this is the first
    event after that.  A swap, not one more piece: RLlib times every piece of the pipeline, and
    that timing alone would cost more than the check."""
    pipeline = internals.runner_module_to_env(env_runner)
    if pipeline is None:
        return
    for i, piece in enumerate(pipeline.connectors):
        if type(piece) is RLlibGetActions:
            pipeline.connectors[i] = GetActions(piece.input_observation_space, piece.input_action_space)


def check_action_inputs(batch: dict[str, Any]) -> None:
    """Raise :class:`PolicyDiverged` when a policy's action-distribution inputs hold a NaN or an
    infinity (the module's outputs: one policy's, or ``{module_id: outputs}``)."""
    if Columns.ACTION_DIST_INPUTS in batch:
        _check(batch[Columns.ACTION_DIST_INPUTS], None)
        return
    for module_id, outputs in batch.items():
        if isinstance(outputs, dict) and Columns.ACTION_DIST_INPUTS in outputs:
            _check(outputs[Columns.ACTION_DIST_INPUTS], module_id)


def _check(inputs: Any, module_id: Any) -> None:
    """A finite sum is the cheap path; past it, only NaN or +inf is divergence: a masking module
    sets the logits of forbidden choices to -inf or to float32's lowest (RLlib's
    ``ActionMaskingTorchRLModule``), whose sum overflows to -inf by design."""
    if isinstance(inputs, torch.Tensor):
        # Small 2-D batches (a few envs): summed in Python, cheaper than a torch reduction.
        small = inputs.dim() == 2 and inputs.numel() <= SMALL_BATCH
        if math.isfinite(sum(map(sum, inputs.tolist())) if small else inputs.sum().item()):
            return
        leaves = [inputs]
    else:
        leaves = [torch.as_tensor(leaf) for leaf in tree.flatten(inputs)]
        if all(math.isfinite(float(leaf.sum())) for leaf in leaves):
            return
    if not any(bool((torch.isnan(leaf) | torch.isposinf(leaf)).any()) for leaf in leaves):
        return  # masked choices
    name = module_id if module_id is not None else "default_policy"
    raise PolicyDiverged(
        f"policy '{name}' produced NaN or infinite action-distribution inputs: its weights diverged"
        "; fix: lower lr, clip gradients (config: grad_clip: 0.5), or scale the rewards"
        " (normalize_rewards: true) and observations (observation_filter: MeanStdFilter)"
    )


class GetActions(RLlibGetActions):
    """RLlib's ``GetActions``, which first checks what it samples from (:func:`check_action_inputs`).
    Named as RLlib's, so that its timer keeps RLlib's metric name."""

    def __call__(
        self,
        *,
        rl_module: Any,
        batch: dict[str, Any],
        episodes: Any,
        explore: Any = None,
        shared_data: dict | None = None,
        **kwargs: Any,
    ) -> Any:
        check_action_inputs(batch)
        return super().__call__(
            rl_module=rl_module,
            batch=batch,
            episodes=episodes,
            explore=explore,
            shared_data=shared_data,
            **kwargs,
        )


def _numbers(stats: dict[str, Any]) -> dict[str, float]:
    """The losses that gradients come from, and gradient norms, among a policy's learner stats
    (an unclipped value loss may be infinite while the clipped one that trains is not)."""
    return {
        k: float(v)
        for k, v in stats.items()
        if (k.endswith("_loss") or k.endswith("global_norm"))
        and "unclipped" not in k
        and isinstance(v, numbers.Real)
        and not isinstance(v, bool)
    }


def _shown(stats: dict[str, float]) -> str:
    keys = [k for k in STATS_SHOWN if k in stats] + [k for k in stats if k.endswith("global_norm")]
    return ", ".join(f"{k}={stats[k]:.4g}" for k in keys)


def check_learners(*, algorithm: Any, result: dict[str, Any], **_: Any) -> None:
    """``on_train_result`` hook: a policy whose learner stats are NaN or infinite ends the run."""
    for module_id, stats in (result.get("learners") or {}).items():
        if not isinstance(stats, dict) or module_id.startswith("__"):
            continue
        trained = stats.get("num_module_steps_trained")
        if not isinstance(trained, numbers.Real) or not float(trained) > 0:
            continue  # nothing learned (nothing sampled): its stats are NaN, not diverged
        losses = _numbers(stats)
        bad = sorted(
            (k for k, v in losses.items() if not math.isfinite(v)), key=lambda k: (k != "total_loss", k)
        )
        if bad:
            raise PolicyDiverged(
                f"policy '{module_id}' diverged at iteration {result.get('training_iteration')}:"
                f" {', '.join(f'{k}={losses[k]}' for k in bad[:3])} (learner stats: {_shown(losses)})"
                "; fix: lower lr, clip gradients (config: grad_clip: 0.5), or scale the rewards"
                " (normalize_rewards: true) and observations (observation_filter: MeanStdFilter)"
            )


def with_learner_stats(message: str, last_result: dict[str, Any] | None) -> str:
    """A runner's :class:`PolicyDiverged` message with the iteration and the last learner stats
    the driver saw (the runner knows neither)."""
    if PolicyDiverged.__name__ not in message or not last_result or "diverged at iteration" in message:
        return message
    iteration = int(last_result.get("training_iteration") or 0)
    parts = [
        f"{module_id}: {_shown(_numbers(stats))}"
        for module_id, stats in (last_result.get("learners") or {}).items()
        if isinstance(stats, dict) and not str(module_id).startswith("__")
    ]
    stats = f"; learner stats of iteration {iteration}: {'; '.join(parts)}" if parts else ""
    head, fix = message.split("; fix:", 1) if "; fix:" in message else (message, "")
    return f"{head} (in iteration {iteration + 1}{stats})" + (f"; fix:{fix}" if fix else "")
