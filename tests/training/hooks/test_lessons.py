"""Lessons advance as mlagents-learn advances them; values reach the env; a restored run goes on
in its lesson."""

import itertools
import json
import shutil
from pathlib import Path

import pytest
import yaml

from envsdk.config.own_keys.environment_parameters import parse
from envsdk.training.hooks.lessons import LessonSetup, LessonState, update_lessons
from tests.helpers import ROOT, progress_rows, trial_dirs

MLAGENTS = json.loads((ROOT / "tests/data/lessons/mlagents_lessons.json").read_text())


@pytest.mark.parametrize("name", sorted(MLAGENTS))
def test_lessons_follow_mlagents(name):
    """tests/data/lessons/mlagents_lessons.py's cases: the same lesson, iteration by iteration, as
    mlagents 1.1.0's EnvironmentParameterManager, given each iteration's ended episodes' returns:
    the hook keeps the reward buffer mlagents keeps (the last min_lesson_length since a change)."""
    case = MLAGENTS[name]
    parameters = parse(case["parameters"], "case", {"default_policy": case["max_steps"]})
    setup = LessonSetup(parameters, {"B": "default_policy"}, multi_agent=False, takes_samplers=False)
    state = LessonState()
    for (steps, returns), expected in zip(case["iterations"], case["expected"], strict=True):
        progress = {"default_policy": steps / case["max_steps"]}
        _, reset = update_lessons(setup, state, progress, {"default_policy": list(returns)})
        assert {p.name: state.lessons.get(p.name, 0) for p in parameters.parameters} == expected["lessons"]
        assert reset == expected["reset"]


EXPERIMENT = {
    "run": "PPO",
    "env": "parameters_env.ParametersEnv",
    "checkpoint_at_end": True,
    "config": {
        "num_env_runners": 0,
        "train_batch_size": 100,
        "minibatch_size": 50,
        "num_epochs": 1,
        "policy_max_steps": {"default_policy": 300},
        "environment_parameters": {
            "wall": {
                "curriculum": [
                    {
                        "name": "Low",
                        "value": 1.0,
                        "completion_criteria": {"measure": "progress", "behavior": "Agent", "threshold": 0.1},
                    },
                    {
                        "name": "Mid",
                        "value": 2.0,
                        "completion_criteria": {"measure": "progress", "behavior": "Agent", "threshold": 0.5},
                    },
                    {"name": "High", "value": 3.0},
                ]
            },
            "mass": {"sampler_type": "uniform", "sampler_parameters": {"min_value": 1, "max_value": 5}},
        },
    },
}


def _walls(record: Path) -> list[float]:
    """The wall values the env was given, each run of equal ones once."""
    return [
        k for k, _ in itertools.groupby(json.loads(line)["wall"] for line in record.read_text().splitlines())
    ]


@pytest.fixture
def experiment(tmp_path):
    def write(record: Path, stop: dict | None = None) -> Path:
        shutil.copy(ROOT / "tests/data/envs/parameters_env.py", tmp_path)
        settings = {**EXPERIMENT, "config": {**EXPERIMENT["config"], "env_config": {"record": str(record)}}}
        if stop:
            settings["stop"] = stop
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump({"lessons": settings}, sort_keys=False))
        return path

    return write


def test_lessons_advance_reach_the_env_and_resume(train, experiment, tmp_path):
    record = tmp_path / "record.jsonl"
    out = train("-f", str(experiment(record)), "--stop-iters", "3")
    assert out.returncode == 0
    assert "lessons wall 1 (2), mass 0 (3)" in out.stdout, out.stdout  # the progress line
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    # progress 100/300 passes 0.1 after the first iteration, 200/300 passes 0.5 after the second
    assert [int(r["curriculum/wall/lesson"]) for r in rows] == [1, 2, 2]
    assert [float(r["curriculum/wall/value"]) for r in rows] == [2.0, 3.0, 3.0]
    assert [float(r["curriculum/mass/value"]) for r in rows] == [3.0] * 3  # the sampler's mean
    assert [float(r["policy_progress/all"]) for r in rows] == pytest.approx([1 / 3, 2 / 3, 1])
    assert _walls(record) == [1.0, 2.0, 3.0]
    masses = [json.loads(line)["mass"] for line in record.read_text().splitlines()]
    assert len(set(masses)) > 20 and 1 <= min(masses) < 2 and 4 < max(masses) <= 5  # one draw per episode

    # a checkpoint in lesson 1 (Mid), restored: the env gets Mid's value, the next iteration advances
    first = train("-f", str(experiment(tmp_path / "first.jsonl")), "--stop-iters", "1")
    assert first.returncode == 0
    mid = sorted(max(trial_dirs(train.results), key=lambda p: p.stat().st_mtime).glob("checkpoint_*"))[-1]
    restored_record = tmp_path / "restored.jsonl"
    again = train("-f", str(experiment(restored_record)), "--stop-iters", "1", "--restore", str(mid))
    assert again.returncode == 0
    newest = max(trial_dirs(train.results), key=lambda p: p.stat().st_mtime)
    (row,) = progress_rows(newest)
    assert int(row["curriculum/wall/lesson"]) == 2  # a fresh run's first iteration ends in lesson 1
    assert _walls(restored_record)[:2] == [1.0, 2.0]  # the start-up check, then the env runner's env


def test_stop_on_policy_progress(train, experiment, tmp_path):
    stop = {"policy_progress/all": 1.0, "training_iteration": 10}
    out = train("-f", str(experiment(tmp_path / "r.jsonl", stop)))
    assert out.returncode == 0, out.stderr[-2000:]
    (trial,) = trial_dirs(train.results)
    assert len(progress_rows(trial)) == 3  # 300 of 300 steps


def test_each_behaviors_reward_buffer_holds_its_own_agent_episodes_since_the_last_change():
    """Multi-agent: a behavior's buffer takes its policy's agent-episodes (not the scene's episodes),
    keeps the last min_lesson_length of them, and every buffer empties when any lesson changes."""
    raw = {
        "gap": {
            "curriculum": [
                {"name": "A", "value": 1.0, "completion_criteria": {
                    "measure": "reward", "behavior": "Big", "min_lesson_length": 3, "threshold": 0.5,
                    "signal_smoothing": False}},
                {"name": "B", "value": 2.0},
            ]
        }
    }  # fmt: skip
    parameters = parse(raw, "case", {})
    setup = LessonSetup(parameters, {"Big": "big", "Small": "small"}, multi_agent=True, takes_samplers=False)
    assert setup.buffer_size("big") == 3 and setup.buffer_size("small") == 1
    state = LessonState()
    updated, _ = update_lessons(setup, state, {}, {"big": [0.9, 0.9], "small": [5.0, 5.0]})
    assert not updated and state.buffers == {"big": [0.9, 0.9], "small": [5.0]}  # 2 < min_lesson_length
    updated, _ = update_lessons(setup, state, {}, {"big": [0.0, 0.6, 0.6, 0.6]})
    assert updated and state.lessons == {"gap": 1} and state.buffers == {}  # the last 3: 0.6 > 0.5
    assert LessonState.from_item(state.as_item()).lessons == {"gap": 1}  # checkpointed as one item
