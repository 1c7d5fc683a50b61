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
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# The test cluster lives on loopback only; token auth would need a shared token
# file between the head and every train.py subprocess, which tests do not test.
os.environ["RAY_AUTH_MODE"] = "disabled"
# Ray Data lists Parquet input (an offline run's data: BC, MARWIL, a recording read back) through a pool
# of FooterReader actors, 32 by default whatever the number of files: on 2 cores, starting those Python
# workers was most of an offline run that reads many files (BC on a 200-file recording: 50 s, 13 s with one).
# One actor reads the footers the same way; the head's and each local Ray's workers inherit this.
os.environ.setdefault("RAY_DATA_PARQUET_FOOTER_NUM_ACTORS", "1")
# torch's lazy import of torch._dynamo (from an optimizer, in tests that build a policy in this
# process) can find torch.ops.prims half-registered once other torch modules are in; import it first.
import importlib

import torch

from envsdk import internals
from tests.helpers import PLAYERS, ROOT, end_processes_mentioning, free_port, run_train

importlib.import_module(internals.PRELOAD[0])

# Tests that build and train an Algorithm in this process get one torch thread, as train.py's
# in-process trial of one CPU does (training/run/in_process.py): two cores are shared with Ray's workers.
torch.set_num_threads(1)

CHECKOUT = pytest.StashKey[set[str]]()
SLOW_FIXTURES = {"ray_address"}  # a test that needs the session's Ray trains or evaluates for real


def _checkout_changes() -> set[str]:
    """Untracked and ignored entries of the checkout (git collapses ignored folders), caches aside."""
    out = subprocess.run(
        ["git", "status", "--porcelain", "--ignored"], cwd=ROOT, capture_output=True, text=True
    ).stdout
    caches = ("__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache")
    entries = [line for line in out.splitlines() if line[:2] in ("??", "!!")]
    return {line[3:] for line in entries if not any(cache in line for cache in caches)}


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[CHECKOUT] = _checkout_changes()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The xdist controller runs no test: its players' folder, made on import, is still empty."""
    with contextlib.suppress(OSError):
        PLAYERS.rmdir()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """No test writes into the checkout: a file or folder that appeared during the session fails it."""
    appeared = _checkout_changes() - session.config.stash.get(CHECKOUT, set())
    if appeared:
        print(f"\nthe tests wrote into the checkout: {', '.join(sorted(appeared))}", file=sys.stderr)
        session.exitstatus = 1


@pytest.fixture(autouse=True)
def fresh_notices() -> None:
    """Each notice is printed once per process; each test sees its own."""
    from envsdk import notices

    notices._seen.clear()


# The files that train for minutes (a module fixture of many runs, or learning to a return), longest
# first: `make test`'s workers take files in collection order (--no-loadscope-reorder), so these
# start first and no worker is left with one of them while the other has nothing to do.
LONGEST_FIRST = [
    "test_corpus.py", "test_spaces.py", "test_configs.py", "test_self_play.py", "test_unity_training.py",
    "test_mlagents_configs.py", "test_memory.py", "test_ecosystem.py", "test_env_faults.py",
    "test_rllib_parity.py", "test_transition_replay.py",
    "test_rollout.py", "test_checkpoint_compat.py", "test_training.py", "test_internals.py",
    "test_offline.py",
]  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what needs Ray (or is marked by its module) as slow: ``make test-fast`` runs the rest.
    The files of LONGEST_FIRST come first, in its order."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def substitutions_under_test(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite may run on stock RLlib (ENVSDK_STOCK=1, envsdk/substitutions.py); a test of one of
    the substitutions (``@pytest.mark.substitution("name")``) still runs with that one on."""
    from tests.helpers import keep_substitutions_on

    mark = request.node.get_closest_marker("substitution")
    if mark is not None:
        keep_substitutions_on(monkeypatch, mark.args)


@pytest.fixture(autouse=True)
def fast_tests_build_no_algorithm(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker rule: a test that builds an RLlib Algorithm trains, and must be marked slow
    (``make test-fast`` leaves slow tests out and has to stay fast)."""
    if request.node.get_closest_marker("slow"):
        return
    from ray.rllib.algorithms.algorithm import Algorithm

    def refuse(self: Algorithm, *args: object, **kwargs: object) -> None:
        pytest.fail(
            "this test builds an RLlib Algorithm (it trains): mark it @pytest.mark.slow", pytrace=False
        )

    monkeypatch.setattr(Algorithm, "__init__", refuse)


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
            # Nothing here reads the workers' output forwarded to drivers, and the log monitor that
            # forwards it polled every worker's log file: a minute of CPU over the suite.
            "--include-log-monitor=false",
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
    # `ray start --block` takes 30 s to end on SIGTERM, and nothing of this cluster is kept
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    end_processes_mentioning(str(temp))


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


@pytest.fixture(scope="session", autouse=True)
def standin_builds() -> Iterator[Path]:
    """The stand-in Unity players in PLAYERS/builds, where configs/unity-*.yaml's builds/NAME finds them."""
    from unity_bridge.standin.build import BUILDS, write_build

    for name, args in BUILDS.items():
        write_build(PLAYERS / "builds", name, args)
    yield PLAYERS / "builds"
    shutil.rmtree(PLAYERS, ignore_errors=True)
