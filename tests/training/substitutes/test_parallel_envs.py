"""A costly env's copies step in processes of their own
(envsdk/training/substitutes/sampling/parallel_envs.py, asked by training/build/stages.py):
the choice from the start-up check's timing, the keys that keep RLlib's default, the same episodes
as RLlib's one-after-another stepping, and one short run."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml

from envsdk import substitutions
from envsdk.training.substitutes.sampling import parallel_envs
from envsdk.training.substitutes.sampling.parallel_envs import StepCost
from tests.helpers import ROOT

pytestmark = pytest.mark.substitution(substitutions.PARALLEL_ENVS)

BUSY_ENV = ROOT / "tests" / "data" / "envs" / "busy_env.py"
NOTICE = "env_checks: {parallel_envs: off} keeps them in the runner's process"


def _experiment(tmp_path: Path, ms: float, **config: Any) -> Any:
    from envsdk.config.experiment import load_experiments

    shutil.copy(BUSY_ENV, tmp_path / "busy_env.py")
    settings = {
        "run": "PPO",
        "env": "busy_env.BusyCartPole",
        "stop": {"training_iteration": 2},
        "config": {
            "env_config": {"ms": ms},
            "num_env_runners": 0,
            "num_envs_per_env_runner": 4,
            "train_batch_size": 64,
            "minibatch_size": 64,
            "num_epochs": 1,
            **config,
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"exp": settings}))
    (exp,) = load_experiments(path)
    return exp


def _mode(tmp_path: Path, ms: float, **config: Any) -> str:
    from envsdk.training.build import build_config

    return str(build_config(_experiment(tmp_path, ms, **config)).config.gym_env_vectorize_mode)


@pytest.mark.parametrize(
    ("wall_ms", "cpu_ms", "cores", "pays"),
    [
        (0.01, 0.01, 16, False),  # CartPole: the pipes cost more than the step
        (2.0, 2.0, 2, True),
        (2.0, 2.0, 1, False),  # one core: the copies would take turns on it
        (2.0, 0.1, 1, True),  # a step that waits (a game): the waits overlap on one core
        (parallel_envs.THRESHOLD_S * 1e3 / 2, 0.0, 16, False),
    ],
)
def test_a_step_pays_for_processes_where_it_is_costly_and_has_cores(wall_ms, cpu_ms, cores, pays):
    cost = StepCost(wall_ms / 1e3, cpu_ms / 1e3, steps=7)
    assert parallel_envs.parallel_pays(cost, cores) is pays


@pytest.mark.parametrize(
    ("ms", "config", "stock", "mode"),
    [
        (0.0, {}, None, "sync"),  # a cheap env: RLlib's default, no notice
        (2.0, {}, None, "async"),
        (2.0, {"gym_env_vectorize_mode": "sync"}, None, "sync"),  # the YAML's value wins
        (2.0, {"env_checks": {"parallel_envs": False}}, None, "sync"),  # YAML's bare `off`
        (2.0, {"stock": [substitutions.PARALLEL_ENVS]}, None, "sync"),
        (2.0, {}, "1", "sync"),  # ENVSDK_STOCK=1
        (2.0, {"num_envs_per_env_runner": 1}, None, "sync"),  # one env: nothing to overlap
    ],
    ids=["cheap", "costly", "yaml-sync", "off", "stock-key", "stock-env", "one-env"],
)
def test_a_costly_envs_copies_step_in_processes_unless_a_key_says_otherwise(
    tmp_path, capsys, monkeypatch, ms, config, stock, mode
):
    monkeypatch.setattr(parallel_envs, "machine_cpus", lambda: 4)
    if stock is None:
        monkeypatch.delenv(substitutions.STOCK, raising=False)
    else:
        monkeypatch.setenv(substitutions.STOCK, stock)
    assert _mode(tmp_path, ms, **config) == mode
    said = [line for line in capsys.readouterr().err.splitlines() if NOTICE in line]
    if mode == "async":
        (line,) = said
        # "over 4 cores" where the busy step got its CPU: a loaded machine may take it away mid-step
        assert "its 4 envs step in a process each" in line and "(gym_env_vectorize_mode: async)" in line
    else:
        assert not said


@pytest.mark.substitution(substitutions.PARALLEL_ENVS, substitutions.BATCHED_SAMPLER)
def test_the_async_envs_give_rllibs_episodes(tmp_path, monkeypatch):
    """The substitution against RLlib's default: the same seeds, weights and draws give the same
    episodes from envs stepped each in its process as from envs stepped one after another."""
    from envsdk.training.build import build_config
    from envsdk.training.substitutes.sampling.batched_runner import BatchedEnvRunner

    monkeypatch.setattr(parallel_envs, "machine_cpus", lambda: 4)
    built = build_config(_experiment(tmp_path, 1.0, seed=7))
    assert built.config.gym_env_vectorize_mode == "async" and built.sampler == "batched"
    ours = BatchedEnvRunner(config=built.config.copy(copy_frozen=False))
    theirs = BatchedEnvRunner(
        config=built.config.copy(copy_frozen=False).env_runners(gym_env_vectorize_mode="sync")
    )
    try:
        assert type(ours.env.unwrapped).__name__ == "AsyncVectorEnv"
        assert type(theirs.env.unwrapped).__name__ == "SyncVectorEnv"
        ours.module.set_state(theirs.module.get_state())
        for call in ({"num_timesteps": 40}, {"num_episodes": 2}):
            torch.manual_seed(0)
            expected = theirs.sample(**call)
            torch.manual_seed(0)
            got = ours.sample(**call)
            assert [len(e) for e in got] == [len(e) for e in expected]
            for want, have in zip(expected, got, strict=True):
                assert np.array_equal(want.get_observations(), have.get_observations())
                assert np.array_equal(want.get_actions(), have.get_actions())
                assert np.array_equal(want.get_rewards(), have.get_rewards())
    finally:
        ours.stop()
        theirs.stop()


@pytest.mark.slow
def test_a_costly_env_trains_with_its_copies_in_processes(tmp_path, monkeypatch):
    from envsdk import internals
    from envsdk.training.build import build_config

    monkeypatch.setattr(parallel_envs, "machine_cpus", lambda: 4)
    built = build_config(_experiment(tmp_path, 2.0))
    with internals.without_object_store():
        algo = built.algo_class(config=built.config)
        try:
            assert type(algo.env_runner.env.unwrapped).__name__ == "AsyncVectorEnv"
            results = [algo.train() for _ in range(2)]
        finally:
            algo.stop()
    assert results[-1]["env_runners"]["num_env_steps_sampled_lifetime"] >= 128
    assert results[-1]["env_runners"]["num_episodes_lifetime"] > 0
