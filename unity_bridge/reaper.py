"""A watchdog that ends a player (and its Xvfb) if the process that started them dies.

Ray may kill an env-runner process without running its clean-up (SIGKILL at
shutdown, OOM kills), which would leave Unity players and X servers behind.
Every launch starts one of these next to the player: it polls its parent
and, once the parent is gone, kills the given process groups and pids.

    python -m unity_bridge.reaper PARENT_PID --group PGID [--pid PID ...]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import time

_POLL_S = 0.5
_GRACE_S = 3.0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(groups: list[int], pids: list[int], sig: int) -> None:
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def reap(parent: int, groups: list[int], pids: list[int]) -> None:
    while os.getppid() == parent and _alive(parent):
        if not any(_alive(p) for p in [*groups, *pids]):
            return  # everything ended normally
        time.sleep(_POLL_S)
    _signal(groups, pids, signal.SIGTERM)
    deadline = time.monotonic() + _GRACE_S
    while time.monotonic() < deadline and any(_alive(p) for p in [*groups, *pids]):
        time.sleep(0.1)
    _signal(groups, pids, signal.SIGKILL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("parent", type=int)
    parser.add_argument("--group", type=int, action="append", default=[])
    parser.add_argument("--pid", type=int, action="append", default=[])
    args = parser.parse_args()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C in the terminal is the parent's to handle
    reap(args.parent, args.group, args.pid)


if __name__ == "__main__":
    main()
