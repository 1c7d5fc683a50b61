"""Training for real: returns move, curricula advance, checkpoints restore."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import ROOT, progress_rows, trial_dirs


def _checkpoint(stdout: str) -> Path:
    line = next(ln for ln in stdout.splitlines() if "best checkpoint:" in ln)
    return Path(line.split("best checkpoint:")[1].strip())


def test_return_moves_on_cartpole(train):
    out = train("-f", "configs/cartpole-ppo.yaml", "--stop-iters", "5", "--seed", "1")
    assert out.returncode == 0
    rows = progress_rows(trial_dirs(train.results)[0])
    returns = [float(r["env_runners/episode_return_mean"]) for r in rows]
    assert returns[-1] > returns[0] + 15, returns
    assert "[cartpole-ppo] iter" in out.stdout  # the progress line


def test_curriculum_function_sets_tasks(train):
    # Run from elsewhere: curriculum_env.py is found next to the YAML file.
    out = train(
        "-f", str(ROOT / "configs" / "curriculum.yaml"), "--stop-iters", "5", cwd=train.results.parent
    )
    assert out.returncode == 0
    rows = progress_rows(trial_dirs(train.results)[0])
    tasks = [float(r["curriculum/task"]) for r in rows]
    steps = [float(r["num_env_steps_sampled_lifetime"]) for r in rows]
    # The tutorial's schedule: task = 1 + timesteps_total // 2000 (capped at 5).
    assert tasks == [min(5, 1 + s // 2000) for s in steps]
    assert tasks[-1] > tasks[0]


def test_restore_continues_from_checkpoint(train):
    first = train("-f", "configs/cartpole-ppo.yaml", "--stop-iters", "2")
    assert first.returncode == 0
    ckpt = _checkpoint(first.stdout)
    before = progress_rows(ckpt.parent)[-1]
    second = train("-f", "configs/cartpole-ppo.yaml", "--stop-iters", "1", "--restore", str(ckpt))
    assert second.returncode == 0
    newest = max(trial_dirs(train.results), key=lambda p: p.stat().st_mtime)
    after = progress_rows(newest)[0]
    # Counters and the policy carry over: the lifetime step count keeps counting.
    assert float(after["num_env_steps_sampled_lifetime"]) > float(before["num_env_steps_sampled_lifetime"])
