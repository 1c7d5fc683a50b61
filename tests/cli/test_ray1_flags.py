"""Every flag of Ray 1.x's ``rllib train`` and ``rllib rollout``: it works here, or it gets one line.

The lists below are Ray 1.x's own (``rllib/train.py``, ``ray/tune/config_parser.py`` and
``rllib/rollout.py`` of Ray 1.13), written out here rather than read from our parser, so that a
flag our parser lacks fails its case.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envsdk.cli import rollout, train
from envsdk.errors import run_cli
from tests.helpers import progress_rows, trial_dirs

BASE = ["--run", "PPO", "--env", "CartPole-v1"]


def loaded(argv: list[str]) -> tuple[Any, dict[str, Any], list]:
    """The flags, overrides and experiments train.py takes from ``argv`` (nothing built or started)."""
    args, overrides = train._parse(argv, "train.py")
    return args, overrides, train.load(args, overrides)


def _stop(exp: Any) -> dict[str, Any]:
    return exp.stop


# flag as typed -> what it must do (a check of (args, overrides, experiment), and a notice's words or "")
TRAIN_WORKS: dict[str, tuple[list[str], Callable[[Any, dict, Any], bool], str]] = {
    "--run": (["--run", "DQN", "--env", "CartPole-v1"], lambda a, o, e: e.run == "DQN", ""),
    "--env": (["--run", "PPO", "--env", "Pendulum-v1"], lambda a, o, e: e.env == "Pendulum-v1", ""),
    "--config": (
        [*BASE, "--config", '{"num_workers": 2, "lr": 0.001}'],
        lambda a, o, e: e.overrides["num_workers"] == 2 and e.overrides["lr"] == 0.001,
        "",
    ),
    "--config=": (  # the offline tutorial's form: --config='{"output": ...}'
        [*BASE, '--config={"output": "/tmp/cartpole-out"}'],
        lambda a, o, e: e.overrides["output"] == "/tmp/cartpole-out",
        "",
    ),
    "--config YAML": ([*BASE, "--config", "{lr: 0.01}"], lambda a, o, e: e.overrides["lr"] == 0.01, ""),
    "--config env": (
        ["--run", "PPO", "--config", '{"env": "Acrobot-v1"}'],
        lambda a, o, e: e.env == "Acrobot-v1",
        "",
    ),
    "--stop": (
        [*BASE, "--stop", '{"timesteps_total": 100000, "episode_reward_mean": 150}'],
        lambda a, o, e: (
            _stop(e) == {"num_env_steps_sampled_lifetime": 100000, "env_runners/episode_return_mean": 150}
        ),
        "",
    ),
    "--stop beside --stop-iters": (
        [*BASE, "--stop", "{training_iteration: 9}", "--stop-iters", "3"],
        lambda a, o, e: _stop(e) == {"training_iteration": 3},
        "",
    ),
    "--experiment-name": ([*BASE, "--experiment-name", "mine"], lambda a, o, e: e.name == "mine", ""),
    "--local-dir": ([*BASE, "--local-dir", "res"], lambda a, o, e: a.storage_path == "res", ""),
    "--framework": ([*BASE, "--framework", "tf2"], lambda a, o, e: True, "--framework tf2 runs as torch"),
    "-v": ([*BASE, "-v"], lambda a, o, e: e.overrides["log_level"] == "INFO", ""),
    "-vv": ([*BASE, "-vv"], lambda a, o, e: e.overrides["log_level"] == "DEBUG", ""),
    "--resume": ([*BASE, "--resume"], lambda a, o, e: a.resume, ""),
    "--trace": ([*BASE, "--trace"], lambda a, o, e: True, "--trace does nothing"),
    "--torch": ([*BASE, "--torch"], lambda a, o, e: True, "--torch does nothing"),
    "--eager": ([*BASE, "--eager"], lambda a, o, e: True, "--eager does nothing"),
    "--ray-address": ([*BASE, "--ray-address", "auto"], lambda a, o, e: a.ray_address == "auto", ""),
    "--ray-ui": ([*BASE, "--ray-ui"], lambda a, o, e: True, "--ray-ui does nothing"),
    "--no-ray-ui": ([*BASE, "--no-ray-ui"], lambda a, o, e: True, "--no-ray-ui does nothing"),
    "--local-mode": (
        [*BASE, "--local-mode"],
        lambda a, o, e: e.overrides["num_env_runners"] == 0,
        "--local-mode",
    ),
    "--ray-num-cpus": ([*BASE, "--ray-num-cpus", "2"], lambda a, o, e: a.ray_num_cpus == 2, ""),
    "--ray-num-gpus": ([*BASE, "--ray-num-gpus", "0"], lambda a, o, e: a.ray_num_gpus == 0, ""),
    "--ray-num-nodes": ([*BASE, "--ray-num-nodes", "1"], lambda a, o, e: True, ""),
    "--ray-object-store-memory": (
        [*BASE, "--ray-object-store-memory", "100000000"],
        lambda a, o, e: a.ray_object_store_memory == 100_000_000,
        "",
    ),
    "--num-samples": ([*BASE, "--num-samples", "3"], lambda a, o, e: e.num_samples == 3, ""),
    "--checkpoint-freq": ([*BASE, "--checkpoint-freq", "5"], lambda a, o, e: e.checkpoint_freq == 5, ""),
    "--checkpoint-at-end": ([*BASE, "--checkpoint-at-end"], lambda a, o, e: e.checkpoint_at_end, ""),
    "--sync-on-checkpoint": (
        [*BASE, "--sync-on-checkpoint"],
        lambda a, o, e: True,
        "--sync-on-checkpoint does",
    ),
    "--keep-checkpoints-num": (
        [*BASE, "--keep-checkpoints-num", "2"],
        lambda a, o, e: e.keep_checkpoints_num == 2,
        "",
    ),
    "--checkpoint-score-attr": (
        [*BASE, "--checkpoint-score-attr", "min-time_total_s"],
        lambda a, o, e: (e.score_metric, e.score_mode) == ("time_total_s", "min"),
        "",
    ),
    "--max-failures": ([*BASE, "--max-failures", "2"], lambda a, o, e: e.max_failures == 2, ""),
    "--scheduler": (
        [*BASE, "--scheduler", "AsyncHyperBand", "--scheduler-config", '{"grace_period": 2}'],
        lambda a, o, e: e.scheduler == {"type": "async_hyperband", "grace_period": 2},
        "",
    ),
    "--scheduler FIFO": ([*BASE, "--scheduler", "FIFO"], lambda a, o, e: e.scheduler is None, ""),
    "--restore": ([*BASE, "--restore", "ckpt"], lambda a, o, e: a.restore == "ckpt", ""),
    "--queue-trials": ([*BASE, "--queue-trials"], lambda a, o, e: True, "--queue-trials does nothing"),
}

# flag as typed -> the words of its one line
TRAIN_REFUSED: dict[str, tuple[list[str], str]] = {
    "--upload-dir": ([*BASE, "--upload-dir", "s3://bucket/run"], "--upload-dir: Ray 2 has no upload folder"),
    "--resources-per-trial": ([*BASE, "--resources-per-trial", '{"cpu": 4}'], "--resources-per-trial"),
    "--export-formats": ([*BASE, "--export-formats", "model"], "--export-formats"),
    "--ray-num-nodes 2": ([*BASE, "--ray-num-nodes", "2"], "--ray-num-nodes 2: Ray 1.x emulated a cluster"),
    "--config neither": ([*BASE, "--config", "no_such_file.yaml"], "is neither a file nor a JSON/YAML"),
    "--config list": ([*BASE, "--config", "[1, 2]"], "is neither a file nor a JSON/YAML"),
    "--stop not a mapping": ([*BASE, "--stop", "100"], "--stop '100' is not a JSON/YAML mapping"),
    "--stop zero": ([*BASE, "--stop", '{"timesteps_total": 0}'], "counts up from 0"),
    "--stop not a number": ([*BASE, "--stop", '{"training_iteration": "ten"}'], "not a number"),
    "--scheduler unknown": ([*BASE, "--scheduler", "Bayes"], "--scheduler: unknown scheduler type 'bayes'"),
    "--scheduler-config alone": ([*BASE, "--scheduler-config", "{grace_period: 2}"], "FIFO"),
    "--num-samples 0": ([*BASE, "--num-samples", "0"], "--num-samples is 0"),
    "abbreviation": ([*BASE, "--stop-it", "2"], "unknown argument '--stop-it'"),
}


@pytest.mark.parametrize("flag", list(TRAIN_WORKS))
def test_a_ray1_train_flag_works(flag, capsys):
    argv, works, says = TRAIN_WORKS[flag]
    args, overrides, experiments = loaded(argv)
    assert works(args, overrides, experiments[0])
    assert says in capsys.readouterr().err


@pytest.mark.parametrize("flag", list(TRAIN_REFUSED))
def test_a_ray1_train_flag_is_refused_in_one_line(flag, capsys):
    argv, words = TRAIN_REFUSED[flag]
    assert run_cli(train.main, argv) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("notice: ")]
    assert words in err[0] and err[0].startswith("error: ")
    assert len(err) <= 2 and all(line.startswith(("error: ", "  fix: ")) for line in err)


def test_config_names_a_file_as_f_does(tmp_path):
    path = tmp_path / "exp.yaml"
    path.write_text("mine:\n  run: PPO\n  env: CartPole-v1\n  stop: {training_iteration: 4}\n")
    _, _, (exp,) = loaded(["--config", str(path)])
    assert (exp.name, exp.stop) == ("mine", {"training_iteration": 4})


def test_experiment_name_of_several_experiments_is_refused(tmp_path, capsys):
    path = tmp_path / "two.yaml"
    path.write_text("a:\n  run: PPO\n  env: CartPole-v1\nb:\n  run: PPO\n  env: CartPole-v1\n")
    assert run_cli(train.main, ["-f", str(path), "--experiment-name", "x"]) == 2
    assert "trains 2 experiments" in capsys.readouterr().err


# Ray 1.x rollout's flags -> (argv after the checkpoint, check of the parsed flags, a notice's words)
ROLLOUT_WORKS: dict[str, tuple[list[str], Callable[[Any], bool], str]] = {
    "--run": (["--run", "PPO"], lambda a: a.run == "PPO", ""),
    "--env": (["--env", "CartPole-v1"], lambda a: a.env == "CartPole-v1", ""),
    "--local-mode": (["--local-mode"], lambda a: a.num_workers == 0, "--local-mode does nothing"),
    "--no-render": (["--no-render"], lambda a: a.render is False, ""),
    "--render": (["--render"], lambda a: a.render is True, ""),
    "--video-dir": (["--video-dir", "videos"], lambda a: a.video == "videos", ""),
    "--steps": (["--steps", "100"], lambda a: a.steps == 100, ""),
    "--episodes": (["--episodes", "3"], lambda a: a.episodes == 3, ""),
    "--out": (["--out", "rollouts.pkl"], lambda a: a.out == "rollouts.pkl", ""),
    "--config": (
        ["--config", '{"env_config": {"size": 3}, "explore": false, "seed": 4, "num_workers": 2}'],
        lambda a: (
            json.loads(a.env_config) == {"size": 3} and (a.explore, a.seed, a.num_workers) == (False, 4, 2)
        ),
        "",
    ),
    "--save-info": (["--save-info"], lambda a: a.save_info, ""),
    "--use-shelve": (["--use-shelve"], lambda a: True, "--use-shelve does nothing"),
    "--track-progress": (["--track-progress"], lambda a: True, "--track-progress does nothing"),
}


@pytest.mark.parametrize("flag", list(ROLLOUT_WORKS))
def test_a_ray1_rollout_flag_works(flag, capsys):
    argv, works, says = ROLLOUT_WORKS[flag]
    assert works(rollout.parser().parse_args(["checkpoint", *argv]))
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--config", '{"lr": 0.1}'], "--config: rollout.py plays the checkpoint's config as trained; 'lr'"),
        (["--config", '{"explore": "yes"}'], "--config: 'explore' is 'yes', but it takes a bool"),
        (["--config", "nothing"], "--config 'nothing' is not a JSON/YAML mapping"),
        (["--steps", "100", "--episodes", "2"], "--episodes and --steps both given"),
    ],
)
def test_a_ray1_rollout_flag_is_refused_in_one_line(argv, words, capsys):
    assert run_cli(rollout.main, ["no-checkpoint", *argv]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("notice: ")]
    assert words in err[0] and len(err) <= 2


@pytest.mark.slow
def test_the_ray1_docs_command_line_trains(tmp_path: Path):
    """The issue's command line, JSON --config and --stop, -v and --experiment-name: 2 iterations."""
    config = {"num_env_runners": 0, "train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}
    from tests.helpers import run_train

    ray1 = [
        "--config",
        json.dumps(config),
        "--stop",
        '{"training_iteration": 2}',
        "-v",
        "--experiment-name",
        "ray1",
    ]
    out = run_train([*BASE, *ray1, "--local-dir", str(tmp_path)], cwd=tmp_path, timeout=240)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    (trial,) = trial_dirs(tmp_path)
    assert trial.parent.name == "ray1"  # --experiment-name: the experiment's folder
    rows = progress_rows(trial)
    assert [int(r["training_iteration"]) for r in rows] == [1, 2]
    assert int(float(rows[-1]["num_env_steps_sampled_lifetime"])) == 256
