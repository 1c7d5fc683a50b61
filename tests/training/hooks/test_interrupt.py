"""SIGTERM (SLURM's time limit) and Ctrl-C during training: checkpoint, exit 0, resume."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from envsdk.training.run.checkpoints import verify
from tests.helpers import ROOT, progress_rows, run_train, start_train, trial_dirs, wait_for_rows

ITERATIONS = 30  # ~0.2 s each: the signal lands well before the last


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_checkpoints_exits_0_and_resume_continues(ray_address, tmp_path, sig):
    args = [
        "-f", "configs/cartpole-ppo.yaml", "--stop-iters", str(ITERATIONS), "--stop-reward", "1000",
        "--ray-address", ray_address, "--local-dir", str(tmp_path),
    ]  # fmt: skip
    proc = start_train(args)
    try:
        wait_for_rows(tmp_path, proc, 2)
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert f"{sig.name} received" in out and f"stopped by {sig.name}: cartpole-ppo" in out
    assert "resume with:     python train.py -f configs/cartpole-ppo.yaml" in out
    assert out.count("--resume") == 1
    (trial,) = trial_dirs(tmp_path)
    stopped_at = len(progress_rows(trial))
    assert 2 <= stopped_at < ITERATIONS
    checkpoints = sorted(trial.glob("checkpoint_*"))
    assert checkpoints, "no checkpoint written on the signal"
    manifest = verify(checkpoints[-1])
    assert manifest and manifest["result"]["training_iteration"] == stopped_at
    if sig is signal.SIGINT:
        return
    resumed = run_train([*args, "--resume"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert trial_dirs(tmp_path) == [trial]  # the same trial goes on
    rows = progress_rows(trial)
    assert [int(r["training_iteration"]) for r in rows] == list(range(1, ITERATIONS + 1))
    steps = [float(r["num_env_steps_sampled_lifetime"]) for r in rows]
    assert steps == sorted(steps) and steps[stopped_at] > steps[stopped_at - 1]


FORKED_AFTER_INSTALL = """
import multiprocessing, os, signal
from envsdk.training.hooks.interrupt import SignalCatcher

def signal_self(answers):
    os.kill(os.getpid(), signal.SIGINT)
    answers.put(catcher.signal_name)

catcher = SignalCatcher()
catcher.install()
fork = multiprocessing.get_context("fork")
answers = fork.Queue()
child = fork.Process(target=signal_self, args=(answers,))
child.start()
print("child saw", answers.get(timeout=30))
child.join(30)
print("child exit", child.exitcode, "run saw", catcher.signal_name)
"""


def test_a_process_forked_after_install_leaves_the_signal_to_the_run():
    """An async vector env's envs are forked from the run's process, its handler with them, and
    Ctrl-C reaches the whole process group: only the run's own process answers it.  (In a fresh
    interpreter: a fork of a test worker whose other threads hold locks may hang.)"""
    out = subprocess.run(
        [sys.executable, "-c", FORKED_AFTER_INSTALL], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["child saw None", "child exit 0 run saw None"], out.stdout
