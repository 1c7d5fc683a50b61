"""Episode returns and lengths over the last ``metrics_num_episodes_for_smoothing`` episodes.

RLlib documents ``env_runners/episode_return_mean`` (and its min, max and the
episode lengths) as smoothed over the last ``metrics_num_episodes_for_smoothing``
episodes (default 100), or over all of an iteration's episodes when more than
that many ended in it.  The old API stack computed exactly that, and the seed
tutorials' stop values (``episode_reward_mean: 475``) assume it.  RLlib 2.60's
new stack does not: its windowed stats are emptied on every reduce, so each
result averages only the episodes that ended in that iteration (CartPole at
2,048 steps per iteration: 4 to 10 of them), as a mean of each runner's mean,
and an iteration in which no episode ended reports NaN.  A stop criterion then
fires on a handful of lucky episodes.

Here every env runner reports each finished episode (``on_episode_end``:
:func:`log_episode`), and the driver keeps the last episodes and writes the
documented values into the result (``on_train_result``: :class:`EpisodeWindow`,
which runs before every other hook), so the stop criteria, checkpoint scores,
the progress line, the reward plot and Tune's schedulers all read the same
number.  Per-module returns (``module_episode_returns_mean``) and, where agent
ids repeat across episodes, per-agent returns get the same window, and so does
the mean return per agent-episode of multi-agent envs (``agent_return_mean``:
:mod:`envsdk.training.hooks.agent_metrics`).
Evaluation results keep RLlib's own values: an evaluation round's episodes are
what it is asked to report.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from typing import Any

from ray.rllib.core import DEFAULT_AGENT_ID, DEFAULT_MODULE_ID
from ray.rllib.utils.metrics import (
    ENV_RUNNER_RESULTS,
    EPISODE_AGENT_RETURN_MEAN,
    EPISODE_LEN_MAX,
    EPISODE_LEN_MEAN,
    EPISODE_LEN_MIN,
    EPISODE_MODULE_RETURN_MEAN,
    EPISODE_RETURN_MAX,
    EPISODE_RETURN_MEAN,
    EPISODE_RETURN_MIN,
)

from envsdk.training.hooks.agent_metrics import agent_return_means
from envsdk.training.hooks.callbacks import reads_the_episode_only

FINISHED = "envsdk_finished_episodes"  # the runners' per-episode records, taken out of the result
# Per-module and per-agent returns: the multi-agent runner's keys, then the single-agent runner's.
PER_NAME = (
    (EPISODE_MODULE_RETURN_MEAN, "modules"),
    (EPISODE_AGENT_RETURN_MEAN, "agents"),
    ("module_episode_return_mean", "modules"),
    ("agent_episode_return_mean", "agents"),
)


def episode_record(episode: Any, chunks: Iterable[Any], source: str = "") -> dict[str, Any]:
    """One finished episode's return, length and per-agent and per-module returns, over all its chunks,
    each agent's module (multi-agent episodes), and ``source``: the env runner and sub-env it ran in.

    RLlib hands an episode that spanned several ``sample()`` calls over in
    chunks: ``episode`` is the last, ``chunks`` the ones sampled before.
    """
    parts = [*chunks, episode]
    total = float(sum(part.get_return() for part in parts))
    agents: dict[str, float] = {}
    modules: dict[str, float] = {}
    agent_modules: dict[str, str] = {}
    if hasattr(episode, "agent_episodes"):  # a MultiAgentEpisode
        for part in parts:
            for single in part.agent_episodes.values():
                value = float(single.get_return())
                agents[str(single.agent_id)] = agents.get(str(single.agent_id), 0.0) + value
                modules[single.module_id] = modules.get(single.module_id, 0.0) + value
                agent_modules[str(single.agent_id)] = single.module_id
    else:
        agents[DEFAULT_AGENT_ID], modules[DEFAULT_MODULE_ID] = total, total
    return {
        "return": total,
        "len": int(sum(len(part) for part in parts)),
        "agents": agents,
        "modules": modules,
        "agent_modules": agent_modules,
        "source": source,
        "ended": time.time(),  # the driver orders one iteration's episodes from several runners by this
    }


@reads_the_episode_only
def log_episode(
    *,
    episode: Any,
    env_runner: Any = None,
    metrics_logger: Any = None,
    prev_episode_chunks: Any = (),
    env_index: int = 0,
    **_: Any,
) -> None:
    """``on_episode_end`` in every training env runner: send the finished episode to the driver."""
    if metrics_logger is None or (env_runner is not None and env_runner.config.in_evaluation):
        return
    source = f"{getattr(env_runner, 'worker_index', 0)}/{env_index}"
    metrics_logger.log_value(
        FINISHED, episode_record(episode, prev_episode_chunks or (), source), reduce="item_series"
    )


class EpisodeWindow:
    """``on_train_result`` in the driver: the result's episode metrics over the last ``size`` episodes.

    One instance serves one algorithm (RLlib keeps a config's callbacks with
    the algorithm built from it).  After a restore the window starts empty,
    as RLlib's own metrics do.  ``stable_agent_ids`` (the env's, :class:`envsdk.envs.base.RLlibHooks`):
    without, an agent id met again in a sub-env's next episode is one agent relayed, one agent-episode.
    """

    stable_agent_ids = True  # a class default for instances pickled before it was an argument

    def __init__(self, size: int, stable_agent_ids: bool = True):
        self.size = max(1, int(size))
        self.stable_agent_ids = stable_agent_ids
        self.window: deque[dict[str, Any]] = deque(maxlen=self.size)
        self.latest: list[dict[str, Any]] = []  # the records of the episodes the last iteration ended

    def __call__(self, *, result: dict[str, Any], **_: Any) -> None:
        runners = result.get(ENV_RUNNER_RESULTS)
        if not isinstance(runners, dict):
            return
        finished = runners.pop(FINISHED, None) or []
        # Ray compiles a series of one item to the item itself, and merges runners' series one after another.
        records = sorted([finished] if isinstance(finished, dict) else finished, key=lambda r: r["ended"])
        self.latest = records  # read by later hooks of the same result (the lessons' reward buffers)
        if len(records) > self.size:  # more episodes this iteration than the window: use them all
            self.window = deque(records, maxlen=len(records))
        else:
            if self.window.maxlen != self.size:
                self.window = deque(self.window, maxlen=self.size)
            self.window.extend(records)
        if not self.window:
            return
        returns = [r["return"] for r in self.window]
        lengths = [r["len"] for r in self.window]
        runners.update(
            {
                EPISODE_RETURN_MEAN: sum(returns) / len(returns),
                EPISODE_RETURN_MIN: min(returns),
                EPISODE_RETURN_MAX: max(returns),
                EPISODE_LEN_MEAN: sum(lengths) / len(lengths),
                EPISODE_LEN_MIN: min(lengths),
                EPISODE_LEN_MAX: max(lengths),
            }
        )
        runners.update(agent_return_means(self.window, self.stable_agent_ids))
        for key, part in PER_NAME:
            reported = runners.get(key)
            if isinstance(reported, dict):  # only what RLlib reports (per-agent ones may be dropped)
                runners[key] = {name: self._mean(part, name, value) for name, value in reported.items()}

    def _mean(self, part: str, name: str, fallback: Any) -> Any:
        values = [r[part][name] for r in self.window if name in r[part]]
        return sum(values) / len(values) if values else fallback
