"""The stall watchdog: one daemon thread per process ends an env call that has not returned.

Each :class:`~envsdk.envs.faults.guard.Guard` records the call in progress (which, since when, on which
thread).  Past the stall bound, the watchdog raises :class:`EnvStalled` in the main thread where
the runner is local and the call can be interrupted (a signal), so the run ends as on any env
error; otherwise, or if the call does not give up within ``GRACE_S``, it records the fault where
the driver reads it (a remote runner's error file) and ends the process.  Settings:
``env_checks: stall_timeout_s`` (:mod:`envsdk.config.own_keys.env_checks`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from typing import Any, Protocol

from envsdk.envs.faults.records import EnvStalled

STALL_SIGNAL = signal.SIGUSR2  # raises EnvStalled in a main thread that is stuck in an env call
GRACE_S = 10.0  # after the stall is raised, how long a call may take to give up before the process ends


class WatchedSite(Protocol):
    @property
    def runner(self) -> int: ...

    def describe(self) -> str: ...


class Watched(Protocol):
    """What the watchdog reads of a guard: its call in progress and its bound."""

    @property
    def site(self) -> WatchedSite: ...

    stall_s: float
    call: str  # reset, step or close
    thread: int  # the thread that made the call
    since: float | None  # time.monotonic() when the call began; None between calls
    reported: float | None  # the ``since`` of the call reported as stuck (one report per call)


_pending: list[EnvStalled] = []  # the stall to raise in the main thread (by the signal handler)
_driver_exit: list[Callable[[], None]] = []  # set by train.py: what the driver ends before it exits


def on_hard_exit(hook: Callable[[], None]) -> None:
    """What this process ends before it exits when a stuck env call cannot be interrupted
    (train.py: the processes it started).  The fault is printed and logged (a remote runner's
    error file, which the driver reads), and the process exits 1."""
    _driver_exit[:] = [hook]


def _raise_pending(signum: int, frame: Any) -> None:
    if _pending:
        raise _pending.pop()


def arm_main_thread() -> None:
    """Let the watchdog raise :class:`EnvStalled` in this process's main thread (called there)."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(STALL_SIGNAL) in (
        signal.SIG_DFL,
        _raise_pending,
    ):
        signal.signal(STALL_SIGNAL, _raise_pending)


class _Watch:
    """One daemon thread per process that looks at every guard's call in progress."""

    def __init__(self) -> None:
        self.guards: weakref.WeakSet[Watched] = weakref.WeakSet()
        self.thread = threading.Thread(target=self._run, name="envsdk-stall-watch", daemon=True)
        self.thread.start()

    def add(self, guard: Watched) -> None:
        self.guards.add(guard)

    def _run(self) -> None:
        while True:
            period = min((g.stall_s for g in list(self.guards)), default=10.0) / 10
            time.sleep(min(max(period, 0.05), 1.0))
            now = time.monotonic()
            for guard in list(self.guards):
                since = guard.since
                if since is not None and now - since > guard.stall_s and guard.reported != since:
                    guard.reported = since  # one report per stuck call
                    _stalled(guard, since, now - since)


_the_watch: list[_Watch] = []


def watch(guard: Watched) -> None:
    """Watch ``guard``'s calls from now on (the process's watchdog starts with the first)."""
    if not _the_watch:
        _the_watch.append(_Watch())
    _the_watch[0].add(guard)


def _stuck_at(thread: int) -> str:
    frame = sys._current_frames().get(thread)
    return "".join(traceback.format_stack(frame)) if frame is not None else "(no stack)"


def _stalled(guard: Watched, since: float, silent_s: float) -> None:
    """End a call that has not returned: raise in the main thread where the runner is local (the
    run then ends as on any error); otherwise, or if the call does not give up within GRACE_S,
    record the fault where the driver reads it and end this process."""
    message = (
        f"{guard.site.describe()} has not returned from {guard.call}() for {silent_s:.0f} s"
        f" (config: env_checks: stall_timeout_s {guard.stall_s:g}); fix: find what the env waits for"
        " (a simulator, server or device that stopped answering), or raise stall_timeout_s if a"
        " call may really take that long"
    )
    stack = _stuck_at(guard.thread)
    if (
        guard.site.runner == 0
        and guard.thread == threading.main_thread().ident
        and signal.getsignal(STALL_SIGNAL) is _raise_pending
    ):
        _pending[:] = [EnvStalled(message)]
        signal.pthread_kill(guard.thread, STALL_SIGNAL)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if guard.since != since:
                return  # the call gave up: the error takes the path of any env error
    _end_process(message, stack)


def _end_process(message: str, stack: str) -> None:
    """Log the stall (a remote runner's error file, envsdk.training.hooks.restarts, keeps the first
    logged exception), say it, let the driver end what it started, and exit."""
    try:
        raise EnvStalled(message)
    except EnvStalled as err:
        logging.getLogger("ray.rllib").error("where the env was stuck:\n%s", stack, exc_info=err)
    print(f"error: EnvStalled: {message}", file=sys.stderr, flush=True)
    for hook in _driver_exit:
        hook()
    os._exit(1)
