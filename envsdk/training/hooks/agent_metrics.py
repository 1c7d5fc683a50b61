"""Per-agent metrics: agent ids that do not repeat, agent steps, and the mean return per agent.

RLlib's multi-agent env runner logs, for every agent id, its steps (this
iteration and lifetime), its episode return and its episode length.  A Unity
game gives each agent a new id every episode, so these grow without bound:
16 agents made 12,803 progress.csv columns in 3 iterations, and the lifetime
counters stay in memory for the whole run.  An env that says
``stable_agent_ids = False`` (:class:`envsdk.envs.base.RLlibHooks`) gets
:func:`drop_per_agent_metrics` as ``on_sample_end`` in every env runner: the
per-agent step counts are pooled under one pseudo agent id,
:data:`ALL_AGENTS`, before the runner reports.  The pool is what RLlib sums
where ``count_steps_by: agent_steps`` (``synchronous_parallel_sample`` reads
``num_agent_steps_sampled`` of each runner, DQN's ``training_step`` sums
``num_agent_steps_sampled_lifetime``), so counting agent steps works on these
envs too.  Per-agent episode returns and lengths are logged later, when the
runner reports its metrics, so :func:`drop_agent_episode_metrics`
(``on_train_result``) removes them from the algorithm's metrics and from the
result, where the pooled counts become plain totals
(``env_runners/num_agent_steps_sampled_lifetime``).  The per-module and
per-episode metrics (``module_episode_returns_mean``,
``num_module_steps_sampled``, ...) stay.

The mean return per agent (:func:`agent_return_means`): RLlib's
``episode_return_mean`` of a multi-agent env is the sum over the episode's
agents; mlagents-learn's "Mean Reward" is the mean over agent-episodes (one
agent's part of an episode, from its start to its end).  The driver's episode
window (:mod:`envsdk.training.hooks.episode_window`) computes
``env_runners/agent_return_mean`` and ``module_agent_return_mean/<module>``
over the same episodes as ``episode_return_mean``.  A Unity agent that ends
mid-episode is one agent-episode and the agent that replaces it (a new id)
another; an agent relayed into the next episode (``envs/unity/rllib_env.py``:
it keeps its id) is one agent-episode over both, joined by id within one
env runner's sub-env.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_AGENT_RETURN_MEAN,
    EPISODE_AGENT_STEPS,
    NUM_AGENT_STEPS_SAMPLED,
    NUM_AGENT_STEPS_SAMPLED_LIFETIME,
)

from envsdk.progress import AGENT_RETURN_MEAN, MODULE_AGENT_RETURN_MEAN

ALL_AGENTS = "__all_agents__"  # the pseudo agent id the step counts of unstable ids are pooled under
EPISODE_PER_AGENT = (EPISODE_AGENT_RETURN_MEAN, EPISODE_AGENT_STEPS)
# The per-agent step counts and how RLlib's env runners reduce them.
AGENT_STEPS = ((NUM_AGENT_STEPS_SAMPLED, "sum"), (NUM_AGENT_STEPS_SAMPLED_LIFETIME, "lifetime_sum"))


def drop_per_agent_metrics(*, metrics_logger: Any = None, **_: Any) -> None:
    """``on_sample_end``: forget this sample's per-agent-id metrics before the runner reports, with
    the step counts pooled under :data:`ALL_AGENTS` (logged even at 0: RLlib reads the key)."""
    if metrics_logger is None:
        return
    for key in EPISODE_PER_AGENT:
        metrics_logger.delete(key, key_error=False)
    for key, reduce in AGENT_STEPS:
        counts = metrics_logger.peek(key, default={})
        ids = [aid for aid in counts if aid != ALL_AGENTS]
        for aid in ids:
            metrics_logger.delete(key, aid)
        metrics_logger.log_value((key, ALL_AGENTS), sum(int(counts[aid]) for aid in ids), reduce=reduce)


def drop_agent_episode_metrics(*, algorithm: Any, result: dict[str, Any], **_: Any) -> None:
    """``on_train_result``: per-agent-id episode metrics out of the algorithm's metrics and the
    result, and the pooled step counts as totals in the result (the algorithm's keep the pool)."""
    runners = result.get(ENV_RUNNER_RESULTS)
    for key in EPISODE_PER_AGENT:
        algorithm.metrics.delete(ENV_RUNNER_RESULTS, key, key_error=False)
        if isinstance(runners, dict):
            runners.pop(key, None)
    if isinstance(runners, dict):
        for key in (NUM_AGENT_STEPS_SAMPLED, NUM_AGENT_STEPS_SAMPLED_LIFETIME):
            counts = runners.get(key)
            if isinstance(counts, dict):
                runners[key] = sum(counts.values())


def agent_episode_returns(
    records: Iterable[dict[str, Any]], stable_agent_ids: bool
) -> list[tuple[str, float]]:
    """(module, return) of every agent-episode in the episode window's records
    (:func:`envsdk.training.hooks.episode_window.episode_record`); single-agent episodes have none.

    With ``stable_agent_ids`` each episode's agents are agent-episodes of their own.  Without, an
    id seen in several episodes of one sub-env (``source``) is one agent relayed from one episode
    into the next, and its parts are one agent-episode.
    """
    joined: dict[tuple[Any, str], tuple[str, float]] = {}
    for n, record in enumerate(records):
        modules = record.get("agent_modules") or {}
        for aid, value in record["agents"].items():
            if aid not in modules:
                continue
            key = (n if stable_agent_ids else record["source"], aid)
            _, before = joined.get(key, ("", 0.0))
            joined[key] = (modules[aid], before + value)
    return list(joined.values())


def agent_return_means(records: Iterable[dict[str, Any]], stable_agent_ids: bool) -> dict[str, Any]:
    """``agent_return_mean`` and ``module_agent_return_mean`` (module -> mean) over the records'
    agent-episodes; nothing where there are none (a single-agent env)."""
    returns = agent_episode_returns(records, stable_agent_ids)
    if not returns:
        return {}
    per_module: dict[str, list[float]] = {}
    for module, value in returns:
        per_module.setdefault(module, []).append(value)
    return {
        AGENT_RETURN_MEAN: sum(value for _, value in returns) / len(returns),
        MODULE_AGENT_RETURN_MEAN: {m: sum(v) / len(v) for m, v in per_module.items()},
    }
