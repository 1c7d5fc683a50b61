"""Per-agent-id metrics dropped for envs whose agent ids do not repeat.

RLlib's multi-agent env runner logs, for every agent id, its steps (this
iteration and lifetime), its episode return and its episode length.  A Unity
game gives each agent a new id every episode, so these grow without bound:
16 agents made 12,803 progress.csv columns in 3 iterations, and the lifetime
counters stay in memory for the whole run.  An env that says
``stable_agent_ids = False`` (:class:`envsdk.envs.base.RLlibHooks`) gets
:func:`drop_per_agent_metrics` as ``on_sample_end`` in every env runner, so
the per-agent step counts never leave the runner.  Per-agent episode returns
and lengths are logged later, when the runner reports its metrics, so
:func:`drop_agent_episode_metrics` (``on_train_result``) removes them from the
algorithm's metrics and from the result.  The per-module and per-episode
metrics (``module_episode_returns_mean``, ``num_module_steps_sampled``, ...)
stay.
"""

from __future__ import annotations

from typing import Any

from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_AGENT_RETURN_MEAN,
    EPISODE_AGENT_STEPS,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
)

PER_AGENT = (
    EPISODE_AGENT_RETURN_MEAN,
    EPISODE_AGENT_STEPS,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
)


def drop_per_agent_metrics(*, metrics_logger: Any = None, **_: Any) -> None:
    """``on_sample_end``: forget this sample's per-agent-id metrics before the runner reports."""
    if metrics_logger is None:
        return
    for key in PER_AGENT:
        metrics_logger.delete(key, key_error=False)


def drop_agent_episode_metrics(*, algorithm: Any, result: dict[str, Any], **_: Any) -> None:
    """``on_train_result``: per-agent-id episode metrics out of the algorithm's metrics and the result."""
    runners = result.get(ENV_RUNNER_RESULTS)
    for key in PER_AGENT:
        algorithm.metrics.delete(ENV_RUNNER_RESULTS, key, key_error=False)
        if isinstance(runners, dict):
            runners.pop(key, None)
