"""Runs fit the cluster they are given instead of waiting silently for CPUs that are not there."""

from __future__ import annotations

import pytest

from envsdk.errors import UserError
from envsdk.training.run.resources import fit, trial_count, trial_need


def config(algo: str, **settings):
    from ray.rllib.algorithms.registry import ALGORITHMS

    cls, default = ALGORITHMS[algo]()
    cfg = default.environment("CartPole-v1").env_runners(**settings)
    return cls, cfg


def test_a_trial_needs_what_rllib_asks_for():
    cls, cfg = config("PPO", num_env_runners=3)
    assert trial_need(cls, cfg, in_process=False).cpus == 4  # main process + 3 runners
    assert trial_need(cls, cfg, in_process=True).cpus == 3  # the main process is train.py's
    cls, cfg = config("IMPALA", num_env_runners=2)
    assert trial_need(cls, cfg, in_process=False).gpus == 0  # IMPALA's own num_gpus default is no request


def test_too_many_env_runners_are_lowered_with_a_notice(capsys):
    cls, cfg = config("PPO", num_env_runners=4)
    assert fit("exp", cls, cfg, in_process=True, trials=1, cluster_cpus=2) is None
    assert cfg.num_env_runners == 2
    assert "num_env_runners 4 -> 2" in capsys.readouterr().err


def test_a_trial_that_cannot_fit_even_without_runners_is_an_error():
    cls, cfg = config("PPO", num_env_runners=2, num_cpus_per_env_runner=1)
    cfg.evaluation(evaluation_num_env_runners=3, evaluation_interval=1)
    with pytest.raises(UserError, match="even without env runners"):
        fit("exp", cls, cfg, in_process=False, trials=1, cluster_cpus=2)


def test_trials_that_do_not_fit_together_run_fewer_at_a_time(capsys):
    cls, cfg = config("PPO", num_env_runners=1)
    assert fit("grid", cls, cfg, in_process=False, trials=4, cluster_cpus=4) == 2
    assert "4 trials of 2 CPUs, 4 in all: 2 at once" in capsys.readouterr().err
    assert fit("grid", cls, cfg, in_process=False, trials=2, cluster_cpus=4) is None


def test_an_offline_trial_counts_its_data_pipeline():
    cls, cfg = config("BC", num_env_runners=0)
    cfg.offline_data(dataset_num_iters_per_learner=1).evaluation(evaluation_interval=1)
    online = trial_need(cls, cfg, in_process=True).cpus
    cfg.offline_data(input_="/data", map_batches_kwargs={"concurrency": 1, "num_cpus": 0.5},
                     input_read_method_kwargs={"num_cpus": 0.5})  # fmt: skip
    assert trial_need(cls, cfg, in_process=True).cpus == online + 1.0


def test_trial_count_multiplies_grids_and_samples():
    space = {("lr",): {"grid_search": [1, 2, 3]}, ("gamma",): {"grid_search": [0.9, 0.99]}, ("x",): 1}
    assert trial_count(2, space) == 12
