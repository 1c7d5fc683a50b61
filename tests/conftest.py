"""Shared fixtures: one Ray head for the whole session, and a train.py runner.

Every training test runs ``train.py`` as a real subprocess that joins the
session's Ray head with ``--ray-address`` (so each test pays no Ray start-up
and the cluster-join path is exercised on every run).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# The test cluster lives on loopback only; token auth would need a shared token
# file between the head and every train.py subprocess, which tests do not test.
os.environ["RAY_AUTH_MODE"] = "disabled"


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


@pytest.fixture(scope="session")
def ray_address(tmp_path_factory) -> str:
    """Start ``ray start --head --block`` once; end its process group afterwards."""
    port = free_port()
    temp = Path("/tmp") / f"envsdk-ray-{os.getpid()}"
    ray_bin = Path(sys.executable).parent / "ray"
    proc = subprocess.Popen(
        [
            str(ray_bin),
            "start",
            "--head",
            "--block",
            f"--port={port}",
            "--num-cpus=4",
            "--node-ip-address=127.0.0.1",
            "--include-dashboard=false",
            "--disable-usage-stats",
            f"--temp-dir={temp}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    address = f"127.0.0.1:{port}"
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.5)
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("ray head did not start")
    time.sleep(2)
    yield address
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=5)  # `ray start --block` takes 30 s to end on a signal; nothing of it is kept
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    end_processes_mentioning(str(temp))


def run_train(args: list[str], cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def train(ray_address, tmp_path):
    """Run train.py joined to the session's Ray; results go to tmp_path/results."""

    def _train(*args: str, cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
        out = run_train(
            [*args, "--ray-address", ray_address, "--local-dir", str(tmp_path / "results")],
            cwd=cwd,
            timeout=timeout,
        )
        if out.returncode != 0:
            print(out.stdout[-4000:], out.stderr[-4000:])
        return out

    _train.results = tmp_path / "results"
    return _train


def trial_dirs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.glob("*/*/progress.csv"))


def progress_rows(trial: Path) -> list[dict]:
    import csv

    with (trial / "progress.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.fixture(scope="session", autouse=True)
def standin_builds() -> Path:
    """The stand-in Unity players under builds/, where configs/unity-*.yaml expect them."""
    from unity_bridge.standin.build import BUILDS, write_build

    for name, args in BUILDS.items():
        write_build(ROOT / "builds", name, args)
    return ROOT / "builds"


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
