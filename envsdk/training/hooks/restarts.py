"""Env runner failures: recorded where they happen, reported where the run is decided.

RLlib restarts a crashed remote env runner by default; when every runner
crashes on every sample, each iteration then samples nothing, and a run
"finishes" having learned nothing.  Its error is printed by the runner's
process and lost to the driver, which only learns that an actor died.  Here:

* a failing remote env runner writes its own error and traceback into the
  experiment's ``env_runner_errors/`` folder (:func:`record_errors`, hooked
  to ``on_environment_created``, so it runs inside every runner process);
* unless the YAML sets ``restart_failed_env_runners`` or
  ``ignore_env_runner_failures``, a failed runner is not restarted: the
  iteration fails at once, and the trial's error names the runner's error
  (:func:`explain`);
* with either set, failures and restarts are counted in every result
  (``env_runner_health``, shown on the progress line), and
  :data:`EMPTY_ITERATIONS_ALLOWED` iterations in a row that sample nothing
  because runners failed end the run with that error (:func:`check_result`).

Old API stack runs (a ModelV2 plugin) take no callback functions: they get
the no-restart default, and their errors are RLlib's.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import time
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.rllib.env.env_runner import NUM_ENV_STEP_FAILURES_LIFETIME

from envsdk.errors import root_cause
from envsdk.notices import one_line_rllib_errors
from envsdk.progress import HEALTH, lookup
from envsdk.training.hooks.callbacks import add_callback

ERRORS_DIR = "env_runner_errors"
EMPTY_ITERATIONS_ALLOWED = 3  # iterations in a row that may sample nothing (with restarts asked for, or
# without a failure: runners slower than sample_timeout_s)
RESTART_GRACE_S = (
    120.0  # with restarts asked for, how long runners may sample nothing while they restart (a new
)
# process that imports RLlib and builds its env: seconds, or a minute on a machine that is busy)
SAMPLED = "env_runners/num_env_steps_sampled"
USER_KEYS = ("restart_failed_env_runners", "ignore_env_runner_failures")


class EnvRunnersFailed(RuntimeError):
    """Iterations sampled nothing because env runners kept failing."""


def prepare(config: Any, exp_dir: Path, asked_for_restarts: bool) -> Path:
    """Hook the recording and checking into ``config``; returns the errors folder."""
    folder = exp_dir / ERRORS_DIR  # made by the first runner that fails
    if not asked_for_restarts:
        config.fault_tolerance(restart_failed_env_runners=False)
    if not config.enable_env_runner_and_connector_v2:
        return folder  # the old API stack takes no callback functions; its failures raise as they are
    add_callback(config, "on_environment_created", functools.partial(record_errors, folder=str(folder)))
    allowed = EMPTY_ITERATIONS_ALLOWED if asked_for_restarts else 0
    check = functools.partial(check_result, allowed=allowed, folder=str(folder), since=time.time())
    add_callback(config, "on_train_result", check)
    return folder


class _ErrorFile(logging.Handler):
    """Writes the first logged exception of this runner process to ``<folder>/<worker>-<pid>.json``."""

    def __init__(self, folder: Path, worker: int):
        super().__init__(logging.ERROR)
        self.path = folder / f"{worker}-{os.getpid()}.json"
        self.worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        if not record.exc_info or record.exc_info[1] is None or self.path.exists():
            return
        root = root_cause(record.exc_info[1])
        text = "".join(traceback.format_exception(*record.exc_info))
        doc = {
            "worker": self.worker,
            "pid": os.getpid(),
            "time": time.time(),
            "error": f"{type(root).__name__}: {root}".strip(),
            "traceback": text,
        }
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, self.path)
        self.path.with_suffix(".txt").write_text(text)


def record_errors(*, env_runner: Any, folder: str, **_: Any) -> None:
    """``on_environment_created`` hook: in a remote runner, keep its first error for the driver."""
    worker = int(getattr(env_runner, "worker_index", 0) or 0)
    one_line_rllib_errors()
    rllib = logging.getLogger("ray.rllib")
    if worker == 0 or any(isinstance(h, _ErrorFile) for h in rllib.handlers):
        return  # the driver's own runner raises into the driver; one handler per process
    Path(folder).mkdir(parents=True, exist_ok=True)
    rllib.addHandler(_ErrorFile(Path(folder), worker))


def recorded_errors(folder: Path, since: float) -> list[dict[str, Any]]:
    """The errors runners recorded in ``folder`` after ``since`` (a time.time()), each with its
    traceback file; unreadable records (one being written) are skipped."""
    found = []
    for path in folder.glob("*.json") if folder.is_dir() else ():
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if doc.get("time", 0) >= since:
            found.append({**doc, "file": str(path.with_suffix(".txt"))})
    return found


def latest_error(folder: Path, since: float) -> dict[str, Any] | None:
    """The newest error a runner recorded after ``since`` (a time.time()), with its file."""
    return max(recorded_errors(folder, since), key=lambda d: d["time"], default=None)


def explain(message: str, folder: Path | None, since: float) -> str:
    """A trial's error, with the failed env runner's own error when one was recorded.

    When the trial died of a runner's death (an actor error), the runner's
    error replaces the message; after too many empty iterations, it is added.
    """
    found = latest_error(folder, since) if folder is not None and folder.is_dir() else None
    if found is None:
        return message
    runner = f"env runner {found['worker']} failed: {found['error']} (traceback in {found['file']})"
    return f"{message}; {runner}" if message.startswith(EnvRunnersFailed.__name__) else runner


@dataclass
class _Streak:
    """One algorithm's iterations that sampled nothing, in a row."""

    count: int = 0
    first: float = 0.0  # time.monotonic() when the first of them ended
    restarts: int = 0  # the restarts counted then
    ever_sampled: bool = False  # whether any iteration of the run sampled env steps


_streaks: weakref.WeakKeyDictionary[Any, _Streak] = weakref.WeakKeyDictionary()


def _sampled_nothing(result: dict[str, Any]) -> bool:
    """No env step in the iteration's result: 0, or no count at all (NaN or missing: RLlib reports NaN
    when no runner delivered)."""
    sampled = lookup(result, SAMPLED)
    return not sampled or (isinstance(sampled, float) and math.isnan(sampled))


def crashed_runners(folder: Path, since: float) -> int:
    """Remote env runner processes that recorded an error since ``since`` (a time.time()): with
    ``restart_failed_env_runners``, RLlib ends a runner whose sample raised and Ray starts a new one;
    RLlib counts the restart only once the new one has answered."""
    return sum(doc.get("worker", 0) >= 1 for doc in recorded_errors(folder, since))


def _health(
    algorithm: Any, result: dict[str, Any], runners: int, folder: Path, since: float
) -> dict[str, int]:
    """Restarts of remote env runners (RLlib's count, or the crashes recorded where RLlib's lags) and
    of sub-envs (``restart_failed_sub_environments``: each failed step recreates the env in its
    runner, which lives on), and the runners healthy now."""
    restarts = int(lookup(result, "fault_tolerance/num_remote_worker_restarts") or 0)
    sub_envs = bool(getattr(algorithm.config, "restart_failed_sub_environments", False))
    if not sub_envs:
        restarts = max(restarts, crashed_runners(folder, since))
    failed_steps = lookup(result, f"env_runners/{NUM_ENV_STEP_FAILURES_LIFETIME}")
    return {
        "restarts": restarts,
        "env_restarts": int(failed_steps or 0) if sub_envs and not _nan(failed_steps) else 0,
        "healthy": int(lookup(result, "fault_tolerance/num_healthy_workers") or 0),
        "env_runners": runners,
    }


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def check_result(
    *, algorithm: Any, result: dict[str, Any], allowed: int, folder: str = "", since: float = 0.0, **_: Any
) -> None:
    """``on_train_result`` hook: count runner failures and iterations that sampled nothing in the
    result (the progress line shows them); fail after too many empty iterations in a row. With
    restarts asked for, a fresh runner that has not started yet gets RESTART_GRACE_S, and so does a
    run whose env has delivered before (a flaky env: RLlib restarts its runners however often they
    fail, and some crash again before they deliver); a fresh runner of an env that never delivered
    and fails again gets none."""
    runners = int(getattr(algorithm.config, "num_env_runners", 0) or 0)
    health = _health(algorithm, result, runners, Path(folder), since)
    if not runners:  # a local runner samples until it has its steps, or raises
        if health["env_restarts"]:
            result[HEALTH] = {**health, "empty_iterations": 0}
        return
    failing = health["restarts"] > 0 or health["env_restarts"] > 0 or health["healthy"] < runners
    streak = _streaks.setdefault(algorithm, _Streak())
    if not _sampled_nothing(result):
        streak.count, streak.ever_sampled = 0, True
    elif streak.count:
        streak.count += 1
    else:
        streak.count, streak.first, streak.restarts = 1, time.monotonic(), health["restarts"]
    result[HEALTH] = {**health, "empty_iterations": streak.count}
    waiting = streak.ever_sampled or health["restarts"] == streak.restarts
    grace = waiting and time.monotonic() - streak.first <= RESTART_GRACE_S
    if failing and streak.count > allowed and not (allowed and grace):
        raise EnvRunnersFailed(
            f"{streak.count} iteration(s) in a row sampled no env steps ({health['restarts']} env runner "
            f"restart(s), {health['healthy']} of {runners} healthy)"
        )
    if not failing and streak.count > EMPTY_ITERATIONS_ALLOWED:
        timeout = algorithm.config.sample_timeout_s
        raise EnvRunnersFailed(
            f"{streak.count} iterations in a row sampled no env steps: no env runner returned its samples"
            f" within sample_timeout_s ({timeout:g} s); fix: raise sample_timeout_s, or lower"
            " rollout_fragment_length, if the env is that slow"
        )
