"""Helpers the tests share (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The stand-in players of this test session: outside the checkout, found through the bridge's
# player path (subprocesses inherit it); conftest's standin_builds writes them.
PLAYERS = Path(os.environ.setdefault("ENVSDK_PLAYER_PATH", tempfile.mkdtemp(prefix="envsdk-players-")))


needs_xvfb = pytest.mark.skipif(
    shutil.which("Xvfb") is None, reason="Xvfb is not installed (`make test` installs it when run as root)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_mentioning(text: str) -> list[int]:
    """Pids of the processes whose command line contains ``text`` (Ray's carry their temp dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
    return found


def end_processes_mentioning(text: str) -> None:
    """SIGKILL what outlived a Ray cluster's own shut-down (a worker of a failed run once did)."""
    for pid in processes_mentioning(text):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def run_train(args: list[str], cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def trial_dirs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.glob("*/*/progress.csv"))


def progress_rows(trial: Path) -> list[dict]:
    import csv

    with (trial / "progress.csv").open() as fh:
        return list(csv.DictReader(fh))


def player_pids() -> set[int]:
    """Stand-in players and Xvfb servers running right now (to check nothing is left behind)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = status.read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        if b"unity_bridge.standin.player" in cmd or cmd.startswith(b"Xvfb"):
            found.add(int(status.parent.name))
    return found
