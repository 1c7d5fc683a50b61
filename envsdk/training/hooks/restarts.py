"""Env runner failures: recorded where they happen, reported where the run is decided.

A failed remote env runner is restarted as RLlib 2.60 restarts it by default
(``restart_failed_env_runners``); its error, printed in the runner's process,
would be lost to the driver, which only learns that an actor died.  Here:

* a failing remote runner writes its error into ``env_runner_errors/`` (:func:`record_errors`);
* failures and restarts are counted in every result (``env_runner_health``, on
  the progress line); an iteration that failed runners leave empty ends the run
  with the runner's error (:func:`explain`), unless the YAML asks for restarts
  (:data:`USER_KEYS`): then after :data:`EMPTY_ITERATIONS_ALLOWED` in a row, and
  for a starting runner or an env that has delivered, past :data:`RESTART_GRACE_S`;
* an iteration that ends before any runner has delivered, none failed (APPO and
  IMPALA return while their runners sample; a busy machine starts them slowly),
  is not counted: the runners are said to be starting and their first samples
  awaited within ``sample_timeout_s`` (:func:`_await_first_samples`).

Old API stack runs (a ModelV2 plugin) take no callback functions: their errors are RLlib's.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import operator
import os
import time
import traceback
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.rllib.env.env_runner import NUM_ENV_STEP_FAILURES_LIFETIME

from envsdk import internals
from envsdk.errors import reports_whole, root_cause
from envsdk.notices import notice, one_line_rllib_errors
from envsdk.progress import HEALTH, lookup
from envsdk.training.hooks.callbacks import add_callback

ERRORS_DIR = "env_runner_errors"
EMPTY_ITERATIONS_ALLOWED = 3  # empty iterations in a row allowed (with restarts, or runners that are slow)
RESTART_GRACE_S = 120.0  # how long restarting runners of an env that has delivered may sample nothing
SAMPLED = "env_runners/num_env_steps_sampled"
USER_KEYS = ("restart_failed_env_runners", "ignore_env_runner_failures")


class EnvRunnersFailed(RuntimeError):
    """Iterations sampled nothing because env runners kept failing."""


def prepare(config: Any, exp_dir: Path, asked_for_restarts: bool) -> Path:
    """Hook the recording and checking into ``config``; returns the errors folder."""
    folder = exp_dir / ERRORS_DIR  # made by the first runner that fails
    if not config.enable_env_runner_and_connector_v2:
        return folder  # the old API stack takes no callback functions; its failures raise as they are
    add_callback(config, "on_environment_created", functools.partial(record_errors, folder=str(folder)))
    restarting = config.restart_failed_env_runners or config.ignore_env_runner_failures
    allowed = EMPTY_ITERATIONS_ALLOWED if asked_for_restarts and restarting else 0
    check = functools.partial(check_result, allowed=allowed, folder=str(folder), since=time.time())
    add_callback(config, "on_train_result", check)
    return folder


class _ErrorFile(logging.Handler):
    """Writes the first logged exception of this runner process to ``<folder>/<worker>-<pid>.json``;
    a later fault that reports itself whole (one that ends the runner, after env errors it
    recovered from with ``restart_failed_sub_environments``) replaces it."""

    def __init__(self, folder: Path, worker: int):
        super().__init__(logging.ERROR)
        self.path = folder / f"{worker}-{os.getpid()}.json"
        self.worker = worker

    def emit(self, record: logging.LogRecord) -> None:
        if not record.exc_info or record.exc_info[1] is None:
            return
        root = root_cause(record.exc_info[1])
        if self.path.exists() and not reports_whole(root):
            return
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
    handler = _ErrorFile(Path(folder), worker)
    rllib.addHandler(handler)
    logging.getLogger("envsdk").addHandler(handler)  # our samplers' faults (EnvKeepsFailing)


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
        "env_restarts": int(failed_steps or 0) if sub_envs and failed_steps == failed_steps else 0,  # not NaN
        "healthy": int(lookup(result, "fault_tolerance/num_healthy_workers") or 0),
        "env_runners": runners,
    }


def check_result(
    *, algorithm: Any, result: dict[str, Any], allowed: int, folder: str = "", since: float = 0.0, **_: Any
) -> None:
    """``on_train_result`` hook: count runner failures and empty iterations (on the progress line) and
    end the run as the module docstring says; ``allowed``: empty iterations in a row with restarts."""
    runners = int(getattr(algorithm.config, "num_env_runners", 0) or 0)
    health = _health(algorithm, result, runners, Path(folder), since)
    if not runners:  # a local runner samples until it has its steps, or raises
        if health["env_restarts"]:
            result[HEALTH] = {**health, "empty_iterations": 0}
        return
    failing = health["restarts"] > 0 or health["env_restarts"] > 0 or health["healthy"] < runners
    streak = _streaks.setdefault(algorithm, _Streak())
    if not failing and not streak.ever_sampled and _sampled_nothing(result):
        _await_first_samples(algorithm, runners, streak)
        internals.uncount_iteration(algorithm, result)
        result[HEALTH] = {**health, "empty_iterations": 0, "starting": True}
        return
    if not _sampled_nothing(result):
        streak.count, streak.ever_sampled = 0, True
    elif streak.count:
        streak.count += 1
    else:
        streak.count, streak.first, streak.restarts = 1, time.monotonic(), health["restarts"]
    result[HEALTH] = {**health, "empty_iterations": streak.count}
    waiting = streak.ever_sampled or health["restarts"] == streak.restarts  # a fresh runner, starting
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


def _await_first_samples(algorithm: Any, runners: int, streak: _Streak) -> None:
    """Wait until each runner has finished the samples it was asked for (a call queued behind them),
    within ``sample_timeout_s`` of the first such iteration; a runner that has not ends the run."""
    timeout = float(algorithm.config.sample_timeout_s or 60.0)
    if not streak.count:
        streak.first = time.monotonic()
        notice(f"env runners starting: waiting for their first samples (sample_timeout_s: {timeout:g} s)")
    streak.count += 1
    left = max(0.0, timeout - (time.monotonic() - streak.first))
    group, index = algorithm.env_runner_group, operator.attrgetter("worker_index")
    answered = group.foreach_env_runner(index, local_env_runner=False, timeout_seconds=left)
    if missing := ", ".join(str(i) for i in range(1, runners + 1) if i not in answered):
        raise EnvRunnersFailed(
            f"env runner {missing} delivered no sample within sample_timeout_s ({timeout:g} s) of the"
            " start; fix: raise sample_timeout_s if the env (or a busy machine) is that slow to start"
        )
