"""Restarts as RLlib's (envsdk/training/hooks/restarts.py): with no restart key in the YAML, a crashed
remote env runner is restarted and the run trains on; an env that always fails ends the run within
its first iteration, with the env's own line.  RLlib's CartPoleCrashing crashes on the runners named;
the delay before a restart (RLlib's 60 s) is shortened only to keep the tests short.  And an
asynchronous algorithm (APPO) on a machine whose cores are busy waits for its runners' first samples
before it counts iterations."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from envsdk.envs.unity.rllib_env import GAME_RESTART_DELAY_S, UnityEnv, UnityGymEnv
from tests.helpers import ROOT, progress_rows, run_train

CRASHING = "ray.rllib.examples.envs.classes.cartpole_crashing.CartPoleCrashing"


def experiment(tmp_path: Path, env_config: str, runners: int, iterations: int) -> Path:
    path = tmp_path / "crash.yaml"
    path.write_text(
        f"""crash:
  run: PPO
  env: {CRASHING}
  stop: {{training_iteration: {iterations}}}
  config:
    env_config: {env_config}
    num_env_runners: {runners}
    delay_between_env_runner_restarts_s: 1
    train_batch_size: 200
    minibatch_size: 100
    num_epochs: 1
    model_config: {{fcnet_hiddens: [16]}}
"""
    )
    return path


@pytest.mark.slow
def test_a_crashing_runner_is_restarted_by_default_and_the_run_trains_on(
    tmp_path: Path, ray_address: str
) -> None:
    """Runner 1 crashes every ~50 steps, runner 2 never: runner 1 is restarted (counted on the
    progress line) and both iterations train (on the session's Ray: no Ray start of its own)."""
    config = experiment(tmp_path, "{p_crash: 0.02, crash_on_worker_indices: [1]}", runners=2, iterations=2)
    args = ["-f", str(config), "--storage-path", str(tmp_path / "runs"), "--ray-address", ray_address]
    out = run_train(args, timeout=240)
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-3000:]
    assert re.search(r"^done: crash: return [\d.]+ after [4-9]\d\d env steps", out.stdout, re.M), said[-3000:]
    assert re.search(r"env runners: [1-9]\d* restarts", out.stdout), out.stdout[-2000:]
    (trial,) = (tmp_path / "runs" / "crash").glob("PPO_*")
    assert len(progress_rows(trial)) == 2


@pytest.mark.slow
@pytest.mark.substitution("env-guard")  # its EnvRaised names the env's error
def test_an_env_that_always_fails_ends_within_one_iteration_with_its_line(
    tmp_path: Path, ray_address: str
) -> None:
    """Every reset of runner 1's env raises: restarting it would go on for ever; the first empty
    iteration ends the run with the env's error, exit 1 (on the session's Ray)."""
    config = experiment(
        tmp_path, "{p_crash_reset: 1.0, crash_on_worker_indices: [1]}", runners=1, iterations=5
    )
    args = ["-f", str(config), "--storage-path", str(tmp_path / "runs"), "--ray-address", ray_address]
    out = run_train(args, timeout=240)
    failed = [line for line in out.stdout.splitlines() if "trial failed:" in line]
    assert out.returncode == 1, (out.stdout + out.stderr)[-3000:]
    assert failed and "EnvRunnersFailed: 1 iteration(s) in a row sampled no env steps" in failed[0], failed
    assert "env runner 1 failed: EnvRaised:" in failed[0] and "Simulated env crash on worker=1" in failed[0]
    (trial,) = (tmp_path / "runs" / "crash").glob("PPO_*")
    assert not (trial / "progress.csv").is_file()  # it ended in its first iteration, before a result


def test_a_game_restarts_sooner_than_rllib_waits() -> None:
    """A Unity game's runner is restarted after GAME_RESTART_DELAY_S, not RLlib's minute."""
    from ray.rllib.algorithms.ppo import PPOConfig

    assert PPOConfig().delay_between_env_runner_restarts_s == 60.0  # RLlib's, the docs' table says so
    for game in (UnityEnv, UnityGymEnv):  # env: unity, env: unity-single
        assert game.config_defaults["delay_between_env_runner_restarts_s"] == GAME_RESTART_DELAY_S < 60.0


@pytest.mark.slow
def test_async_algorithms_count_the_iterations_that_train_while_both_cores_are_busy(tmp_path: Path) -> None:
    """RLlib's tuned APPO file, --stop-iters 2, beside two processes that keep both cores busy: its
    iterations return while the runner samples, and one that ends before the first sample is not
    counted: the run says the runners are starting, waits, then trains 2 iterations. (IMPALA's
    iterations pass through the same hook: APPO's algorithm derives from IMPALA's, and the hook
    reads neither's name; its file under the same hog was 50 s more of the suite.)"""
    file, name, algorithm = "cartpole-appo", "cartpole-appo", "APPO"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        config = ROOT / "tests" / "data" / "corpus" / f"{file}.yaml"
        args = ["-f", str(config), "--stop-iters", "2", "--storage-path", str(tmp_path / "runs")]
        out = run_train(args, timeout=420)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-3000:]
    assert re.search(rf"^done: {name}: return -?[\d.]+ after [\d,]+ env steps", out.stdout, re.M), said
    (trial,) = (tmp_path / "runs" / name).glob(f"{algorithm}_*")
    counted = [int(float(r["training_iteration"])) for r in progress_rows(trial)]
    trained = [r for r in progress_rows(trial) if int(float(r["training_iteration"])) >= 1]
    assert counted[-2:] == [1, 2] and set(counted) <= {0, 1, 2}, counted
    assert all(float(r["num_env_steps_sampled_lifetime"]) > 0 for r in trained), trained
