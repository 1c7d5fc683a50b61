"""What a trial needs from the Ray cluster, and making a run fit what the cluster has.

Ray never schedules a trial (or an env runner) that asks for more CPUs than
the cluster has: the run then waits silently until its time limit.  A
YAML written for a 36-core node (``num_workers: 4`` on a laptop, IMPALA's
remote learner beside two env runners) does exactly that.  Here, before
training:

* a trial's needs come from RLlib itself (``Algorithm.default_resource_request``:
  the main process, env runners, evaluation runners, learners), plus an
  offline run's data pipeline; a trial that trains in train.py's own process
  does not count its main process;
* a trial that does not fit the cluster (all its CPUs: on a shared cluster a
  trial that fits waits its turn) gets fewer env runners, with a notice (as
  ``num_env_runners: auto`` does), or exit status 2 when even none fit;
* Tune trials that do not all fit at once run fewer at a time, with a notice;
* :class:`PendingWatch` reports a Tune trial that still waits for resources
  (the cluster is shared, or shrank), naming what it waits for.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ray import tune

from envsdk.errors import UserError
from envsdk.notices import notice

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm import Algorithm

REPORT_AFTER_S = 60.0  # a trial pending this long (with none running) is reported


@dataclass(frozen=True)
class Need:
    cpus: float
    gpus: float


def _bundles(algo_class: type[Algorithm], config: Any) -> list[dict[str, float]]:
    """RLlib's placement request for a trial: the algorithm's own process first, then its actors."""
    request = algo_class.default_resource_request(config)
    assert isinstance(request, tune.PlacementGroupFactory), request  # what every new-stack algorithm returns
    return list(request.bundles)


def trial_need(algo_class: type[Algorithm], config: Any, in_process: bool) -> Need:
    """CPUs and GPUs one trial takes from the cluster (RLlib's own placement request)."""
    bundles = _bundles(algo_class, config)
    if in_process and bundles:  # the Algorithm runs in train.py's process, not in a Ray actor
        bundles = bundles[1:]
    return Need(
        cpus=sum(float(b.get("CPU", 0)) for b in bundles) + _pipeline_cpus(config),
        gpus=sum(float(b.get("GPU", 0)) for b in bundles),
    )


def main_process_cpus(algo_class: type[Algorithm], config: Any) -> int:
    """CPUs RLlib asks for the algorithm's own process: its first bundle (the driver and a local learner)."""
    bundles = _bundles(algo_class, config)
    first = bundles[0] if bundles else {}
    return max(1, math.ceil(float(first.get("CPU", 1))))


def _pipeline_cpus(config: Any) -> float:
    """An offline run's data pipeline: its pre-learner actors and one read task (RLlib counts neither)."""
    if not config.is_offline:
        return 0.0
    mapping = config.map_batches_kwargs or {}
    reads = config.input_read_method_kwargs or {}
    concurrency = mapping.get("concurrency", 2)
    actors = max(concurrency) if isinstance(concurrency, tuple | list) else concurrency
    return float(actors) * float(mapping.get("num_cpus", 1)) + float(reads.get("num_cpus", 1))


def trial_count(num_samples: int, search_space: dict[tuple, Any]) -> int:
    grids = [
        len(d["grid_search"]) for d in search_space.values() if isinstance(d, dict) and "grid_search" in d
    ]
    return num_samples * math.prod(grids)


def fit(
    name: str, algo_class: type, config: Any, in_process: bool, trials: int, cluster_cpus: float
) -> int | None:
    """Lower env runners until one trial fits ``cluster_cpus``; returns how many trials may run at once.

    None: all of them.  A trial that does not fit even with no env runners is a UserError.
    """
    need = trial_need(algo_class, config, in_process)
    runners = int(config.num_env_runners or 0)
    per_runner = float(config.num_cpus_per_env_runner or 1) or 1.0
    if need.cpus > cluster_cpus and runners:
        fewer = max(0, runners - math.ceil((need.cpus - cluster_cpus) / per_runner))
        notice(
            f"{name}: a trial needs {need.cpus:g} CPUs and the cluster has {cluster_cpus:g}: "
            f"num_env_runners {runners} -> {fewer}"
        )
        config.env_runners(num_env_runners=fewer)
        need = trial_need(algo_class, config, in_process)
    if need.cpus > cluster_cpus:
        raise UserError(
            f"{name}: a trial needs {need.cpus:g} CPUs even without env runners (learners, evaluation), "
            f"and the cluster has {cluster_cpus:g}",
            "lower num_learners / evaluation_num_env_runners, or run on a bigger machine",
        )
    at_once = int(cluster_cpus // need.cpus) if need.cpus else trials
    if trials > max(1, at_once):
        notice(f"{name}: {trials} trials of {need.cpus:g} CPUs, {cluster_cpus:g} in all: {at_once} at once")
        return max(1, at_once)
    return None


class PendingWatch(tune.Callback):
    """Reports a trial that has waited for resources for :data:`REPORT_AFTER_S` with no trial running."""

    def __init__(self) -> None:
        self.since: dict[str, float] = {}
        self.reported: set[str] = set()

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        import ray

        now = time.monotonic()
        running = any(t.status == "RUNNING" for t in trials)
        for trial in trials:
            if trial.status != "PENDING" or running:
                self.since.pop(trial.trial_id, None)
                continue
            waited = now - self.since.setdefault(trial.trial_id, now)
            if waited >= REPORT_AFTER_S and trial.trial_id not in self.reported:
                self.reported.add(trial.trial_id)
                wants = trial.placement_group_factory.required_resources
                free = {k: v for k, v in ray.available_resources().items() if k in wants}
                print(f"trial {trial.trial_id} has waited {waited:.0f}s for resources: it needs {wants}, "
                      f"the cluster has {free} free", flush=True)  # fmt: skip
