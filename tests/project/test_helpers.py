"""The test helpers that decide what a leak check sees: under pytest-xdist, only its worker's processes."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from tests.helpers import PLAYERS, ROOT, WORKER, processes_mentioning


def _sleeper(token: str, env: dict[str, str]) -> subprocess.Popen:
    """A process that says when it runs: the parent learns exec succeeded before the kernel has set
    the new command line up, so a look at /proc right after Popen may not see ``token`` yet."""
    code = "import time; print('running', flush=True); time.sleep(60)"
    return subprocess.Popen([sys.executable, "-c", code, token], env=env, stdout=subprocess.PIPE, text=True)


def test_process_checks_see_this_workers_processes_and_no_other_workers():
    token = f"envsdk-probe-{uuid.uuid4().hex}"
    others = {**os.environ, "PYTEST_XDIST_WORKER": f"{WORKER}-other"}
    started = [_sleeper(token, dict(os.environ)), _sleeper(token, others)]
    try:
        for proc in started:
            assert proc.stdout is not None and proc.stdout.readline() == "running\n"
        found = set(processes_mentioning(token))
        assert started[0].pid in found  # what this worker started (and what that starts) counts
        assert (started[1].pid in found) == (not WORKER)  # another worker's process does not
    finally:
        for proc in started:
            proc.kill()
            proc.wait()


def test_each_worker_has_its_own_players_folder():
    assert os.environ["ENVSDK_PLAYER_PATH"] == str(PLAYERS)
    assert PLAYERS.name.endswith(f"-{WORKER}") if WORKER else "-gw" not in PLAYERS.name


def test_the_longest_first_files_exist():
    from tests.conftest import LONGEST_FIRST

    assert [name for name in LONGEST_FIRST if not list((ROOT / "tests").rglob(name))] == []
