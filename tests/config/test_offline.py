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


# ---- ML-Agents demonstrations (.demo) as offline data ------------------------------------------

LEAN = ROOT / "tests" / "data" / "demos" / "cartpole_lean.py"


def _demo(shapes, continuous=0, branches=(2,), dones=(0, 0, 1, 0, 1, 0), limit=(0, 0, 0, 0, 1, 0)):
    from unity_bridge.demo_files import Demonstration

    rng = np.random.default_rng(0)
    rows = len(dones)
    return Demonstration(
        behavior_name="Walker",
        observation_shapes=shapes,
        continuous_size=continuous,
        discrete_branches=branches,
        observations=tuple(rng.random((rows, *s), dtype=np.float32) for s in shapes),
        continuous_actions=rng.random((rows, continuous), dtype=np.float32),
        discrete_actions=np.asarray([rng.integers(0, b, rows) for b in branches], np.int64).T.reshape(
            rows, -1
        ),
        rewards=rng.random(rows, dtype=np.float32),
        dones=np.asarray(dones, bool),
        max_step_reached=np.asarray(limit, bool),
        final_observations=tuple(rng.random((3, *s), dtype=np.float32) for s in shapes),
    )


@pytest.mark.parametrize(("continuous", "branches"), [(0, (3,)), (2, ())])
def test_demo_becomes_transitions(tmp_path, continuous, branches):
    """Vectors concatenated; each episode's next observations, its last one the recorded final one;
    ended by the game: terminated, by the step limit or the recording's end: truncated."""
    from envsdk.config.offline import demo_transitions
    from unity_bridge.demo_files import read_demo, write_demo

    write_demo(tmp_path / "walk.demo", _demo(((3,), (2,)), continuous, branches))
    demo = read_demo(tmp_path / "walk.demo")
    rows = demo_transitions(tmp_path / "walk.demo")
    obs = np.concatenate(demo.observations, axis=1)
    finals = np.concatenate(demo.final_observations, axis=1)
    np.testing.assert_array_equal(rows["obs"], obs)
    np.testing.assert_array_equal(rows["new_obs"], [obs[1], obs[2], finals[0], obs[4], finals[1], finals[2]])
    expected = demo.discrete_actions[:, 0] if branches else demo.continuous_actions
    np.testing.assert_array_equal(rows["actions"], expected)
    assert rows["terminateds"].tolist() == [False, False, True, False, False, False]
    assert rows["truncateds"].tolist() == [False, False, False, False, True, True]
    assert len(set(rows["eps_id"])) == 3


@pytest.mark.parametrize(
    ("shapes", "continuous", "branches", "words"),
    [
        (((4,), (6, 8, 3)), 0, (2,), "observations [(4,), (6, 8, 3)] are not all vectors"),
        (((4,),), 0, (2, 3), "actions are 0 continuous + discrete branches [2, 3], not one discrete branch"),
        (((4,),), 2, (3,), "actions are 2 continuous + discrete branches [3], not one"),
    ],
)
def test_demo_offline_cannot_read_is_refused(tmp_path, shapes, continuous, branches, words):
    from envsdk.config.offline import demo_transitions
    from envsdk.errors import UserError
    from unity_bridge.demo_files import write_demo

    write_demo(tmp_path / "walk.demo", _demo(shapes, continuous, branches))
    with pytest.raises(UserError) as error:
        demo_transitions(tmp_path / "walk.demo")
    assert words in error.value.message and "\n" not in error.value.message and error.value.hint


def test_unreadable_demo_input_is_refused_before_training(tmp_path):
    (tmp_path / "cut.demo").write_bytes(b"\x05\x08\x01")
    (tmp_path / "bc.yaml").write_text("bc:\n  run: BC\n  env: CartPole-v1\n  config:\n    input: cut.demo\n")
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", "bc.yaml", "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith(("error:", "  fix:"))]
    assert len(lines) == 2 and "bc.yaml:5" in lines[0] and "cut.demo is cut short" in lines[0], out.stderr


def test_bc_learns_from_a_scripted_players_demo(train, tmp_path):
    """rollout.py --policy records a scripted CartPole player as a .demo; input: that file trains BC,
    whose cloned policy (played by the run's evaluation) returns far more than random play's ~22."""
    from tests.helpers import rollout_here

    recorded = rollout_here("--policy", f"{LEAN}:push", "--env", "CartPole-v1", "--episodes", 4,
                            "--seed", 0, "--out", tmp_path / "lean.demo")  # fmt: skip
    assert recorded.returncode == 0, recorded.stderr
    (tmp_path / "bc.yaml").write_text(
        "lean-bc:\n  run: BC\n  env: CartPole-v1\n  stop: {training_iteration: 2}\n  config:\n"
        "    input: lean.demo\n    train_batch_size_per_learner: 256\n    dataset_num_iters_per_learner: 40\n"
        "    lr: 0.01\n    evaluation_interval: 1\n    evaluation_duration: 5\n"
        "    evaluation_duration_unit: episodes\n    model_config: {fcnet_hiddens: [32]}\n"
    )
    out = train("-f", "bc.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    assert "input: lean.demo read as transitions" in out.stderr
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    assert len(rows) == 2
    assert float(rows[-1]["evaluation/env_runners/episode_return_mean"]) > 60


# ---- what RLlib's offline data cannot take, refused before anything starts --------------------------


def _offline_build(tmp_path: Path, run: str, env: str, data: Path) -> None:
    import yaml

    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"exp": {"run": run, "env": env, "config": {"input": str(data)}}}))
    (exp,) = load_experiments(path)
    build_config(exp)


@pytest.mark.parametrize("run", ["BC", "MARWIL"])
def test_an_offline_algorithm_on_a_multi_agent_env_is_refused(tmp_path, run):
    """RLlib 2.60's offline data reads single-agent episodes only; it would fail inside Ray Data."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from envsdk.errors import UserError

    data = tmp_path / "data"
    data.mkdir()
    pq.write_table(pa.table({"obs": [1.0, 2.0]}), data / "part.parquet")
    with pytest.raises(UserError, match=f"{run} on a multi-agent env") as raised:
        _offline_build(tmp_path, run, "pettingzoo.butterfly.knights_archers_zombies_v11", data)
    assert "exp.yaml:" in raised.value.message and raised.value.hint


@pytest.mark.parametrize("content", [b"", b"PAR1 not a footer"], ids=["empty", "damaged"])
def test_a_damaged_parquet_file_is_named_not_a_traceback(tmp_path, content):
    from envsdk.errors import UserError

    data = tmp_path / "data"
    data.mkdir()
    (data / "part.parquet").write_bytes(content)
    with pytest.raises(UserError, match=r"part\.parquet is not a Parquet file that can be read"):
        _offline_build(tmp_path, "BC", "CartPole-v1", data)
