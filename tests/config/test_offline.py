"""Offline algorithms: rollout.py's experience files and Ray 1.x JSON output as training data."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers import ROOT, progress_rows, trial_dirs


@pytest.fixture(scope="module")
def expert(ray_address, tmp_path_factory) -> Path:
    """A rollout.py experience file of a briefly trained CartPole PPO policy."""
    folder = tmp_path_factory.mktemp("expert")
    trained = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", "configs/cartpole-ppo.yaml", "--stop-iters", "3",
         "--ray-address", ray_address, "--local-dir", str(folder / "results")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    data = folder / "cartpole-expert.npz"
    rolled = subprocess.run(
        [sys.executable, str(ROOT / "rollout.py"), str(folder / "results" / "cartpole-ppo"),
         "--episodes", "4", "--out", str(data)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert rolled.returncode == 0, rolled.stderr[-2000:]
    return data


def test_experience_file_becomes_transitions(expert):
    from envsdk.config.offline import transitions

    data = np.load(expert)
    rows = transitions(expert)
    lengths = [len(data[f"ep{i:04d}/agent/rewards"]) for i in range(4)]
    assert len(rows["obs"]) == sum(lengths) and rows["obs"].shape[1:] == (4,)
    first = data["ep0000/agent/obs"]
    np.testing.assert_array_equal(rows["obs"][: lengths[0]], first[: lengths[0]])
    np.testing.assert_array_equal(rows["new_obs"][: lengths[0]], first[1 : lengths[0] + 1])
    assert len(set(rows["eps_id"])) == 4
    assert rows["terminateds"].sum() + rows["truncateds"].sum() == 4  # each episode ends once


def _bc(train, cwd: Path, *args: str) -> list[dict]:
    out = train("-f", str(ROOT / "configs" / "cartpole-bc.yaml"), "--stop-iters", "2", *args, cwd=cwd)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "offline data: 1 pre-learner actor(s)" in out.stderr
    trials = trial_dirs(train.results)
    assert trials
    return [progress_rows(t) for t in trials]


def test_configs_bc_trains_from_a_rollout_file(train, expert, tmp_path):
    shutil.copy(expert, tmp_path / "cartpole-expert.npz")  # the config's input:, found in the working dir
    (runs,) = _bc(train, tmp_path)
    assert len(runs) == 2
    assert float(runs[-1]["learners/__all_modules__/num_env_steps_trained_lifetime"]) > 0
    assert float(runs[-1]["evaluation/env_runners/episode_return_mean"]) > 0  # the clone was played
    assert (tmp_path / "cartpole-expert.npz.rllib" / "transitions.parquet").is_file()


def test_offline_trials_side_by_side_do_not_wait_forever(train, expert, tmp_path):
    """Two Tune trials, each with its data pipeline, on the test cluster's 4 CPUs."""
    shutil.copy(expert, tmp_path / "cartpole-expert.npz")
    runs = _bc(train, tmp_path, "--config.lr={grid_search: [0.001, 0.003]}")
    assert len(runs) == 2 and all(len(rows) == 2 for rows in runs)


def test_ray1_json_output_is_read(train, expert, tmp_path):
    """Ray 1.x ``output: /tmp/out`` files: SampleBatch columns, one JSON object per line."""
    from envsdk.config.offline import transitions

    rows = transitions(expert)
    folder = tmp_path / "out"
    folder.mkdir()
    with (folder / "output-2021-06-01_12-00-00_worker-0_0.json").open("w") as fh:
        for start in range(0, len(rows["obs"]), 100):
            part = {k: v[start : start + 100] for k, v in rows.items()}
            episodes = {e: i for i, e in enumerate(dict.fromkeys(rows["eps_id"]))}
            record = {
                "type": "SampleBatch",
                "obs": part["obs"].tolist(),
                "new_obs": part["new_obs"].tolist(),
                "actions": part["actions"].tolist(),
                "rewards": part["rewards"].tolist(),
                "dones": (part["terminateds"] | part["truncateds"]).tolist(),
                "eps_id": [episodes[e] for e in part["eps_id"]],
            }
            fh.write(json.dumps(record) + "\n")
    out = train("-f", str(ROOT / "configs" / "cartpole-bc.yaml"), "--stop-iters", "1",
                f"--config.input={folder}", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "read as Ray 1.x SampleBatch records" in out.stderr
    (trial,) = trial_dirs(train.results)
    assert float(progress_rows(trial)[-1]["learners/__all_modules__/num_env_steps_trained_lifetime"]) > 0


def test_offline_config_without_data_names_it(tmp_path):
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", str(ROOT / "configs" / "cartpole-bc.yaml"),
         "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2
    assert "the offline data 'cartpole-expert.npz' is not there" in out.stderr
    assert "rollout.py" in out.stderr  # how to record it
