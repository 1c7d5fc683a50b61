"""When a trial stops: its ``stop`` criteria, and a check that each one can ever be met.

:class:`StopCriteria` applies Tune's rule for a stop mapping (any metric at
or above its value) on both paths (the in-process trial and Tune's
:class:`TuneStopper`).  Metric names RLlib defines were checked before the
run (:func:`envsdk.config.validation.check_metric`); a name it does not define (a
custom metric of a callback) is accepted then, and must show up in the
results within :data:`PATIENCE` iterations, else the run stops with an error
naming the metrics the results do have, instead of training until the
allocation ends.
"""

from __future__ import annotations

import math
from typing import Any

from ray import tune

from envsdk.errors import UserError, closest
from envsdk.progress import lookup

PATIENCE = 5  # iterations a custom stop metric has to appear in


def _flat_keys(result: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in result.items():
        name = f"{prefix}{key}"
        keys |= _flat_keys(value, f"{name}/") if isinstance(value, dict) else {name}
    return keys


class StopCriteria:
    """``stop`` of an experiment; ``unverified``: the metrics RLlib does not define."""

    def __init__(self, stop: dict[str, float], unverified: set[str]):
        self.stop = dict(stop)
        self.waiting = set(unverified)

    def reached(self, result: dict[str, Any]) -> bool:
        for metric, value in self.stop.items():
            got = lookup(result, metric)
            if isinstance(got, int | float) and not math.isnan(got) and got >= value:
                return True
        return False

    def missing(self, result: dict[str, Any]) -> str | None:
        """After :data:`PATIENCE` iterations, why a custom stop metric never appeared (else None)."""
        self.waiting = {m for m in self.waiting if lookup(result, m) is None}
        iteration = int(result.get("training_iteration") or 0)
        if not self.waiting or iteration < PATIENCE:
            return None
        metric = sorted(self.waiting)[0]
        near = closest(metric, _flat_keys({k: v for k, v in result.items() if k != "config"}), n=2)
        hint = f"did you mean {', '.join(repr(n) for n in near)}?" if near else "check the metric's name"
        return f"stop key '{metric}' is not in any of the first {iteration} results; {hint}"


class TuneStopper(tune.Stopper):
    """The same criteria for Tune trials; a stop metric that never appears stops every trial."""

    def __init__(self, criteria: StopCriteria):
        self.criteria = criteria
        self.problem: str | None = None

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        self.problem = self.problem or self.criteria.missing(result)
        return self.problem is not None or self.criteria.reached(result)

    def stop_all(self) -> bool:
        return self.problem is not None

    def raise_problem(self) -> None:
        if self.problem:
            raise UserError(self.problem, "fix the stop key in the YAML")
