"""Each private Ray/RLlib/Tune/CPython API that envsdk.internals relies on, checked on the installed versions.

A failure here names the assumption an upgrade broke; fix it in envsdk/internals.py (one place).
"""

from __future__ import annotations

import atexit
import functools
import importlib
import inspect
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
import ray

from envsdk import internals


def test_the_pinned_ray_is_the_one_checked():
    assert ray.__version__ == internals.RAY_VERSION, "re-check every assumption below, then bump RAY_VERSION"


def test_atexit_runs_its_hooks_on_request():
    assert callable(atexit._run_exitfuncs)
    ran = []
    atexit.register(ran.append, 1)
    internals.run_exit_hooks()
    assert ran == [1]


def test_rllib_api_loggers_exist():
    for name in internals.RLLIB_API_LOGGERS:
        importlib.import_module(name)


def test_deprecated_defaults_are_recognised():
    from ray.rllib.algorithms.ppo import PPOConfig

    defaults = PPOConfig().to_dict()
    assert internals.is_deprecated_default(defaults["sgd_minibatch_size"])  # a Ray 1.x name RLlib keeps
    assert not internals.is_deprecated_default(defaults["lr"])


def test_a_config_keeps_its_env_to_module_connector():
    from ray.rllib.algorithms.ppo import PPOConfig

    made = functools.partial(print)
    config = PPOConfig().env_runners(env_to_module_connector=made)
    assert internals.env_to_module_connector(config) is made


@pytest.mark.parametrize("name", sorted(internals.OVERRIDDEN))
def test_overridden_private_methods_exist_with_their_arguments(name):
    module, qualname = name.split(":")
    owner, method = qualname.split(".")
    function = getattr(getattr(importlib.import_module(module), owner), method)
    expected = internals.OVERRIDDEN[name].split("(")[-1].rstrip(")").split(", ")
    params = [p for p in inspect.signature(function).parameters if p not in ("self", "cls")]
    assert params == expected, (name, params)


def test_tune_gives_a_trainable_its_storage():
    from ray.tune.trainable import Trainable

    assert "self._storage = storage" in inspect.getsource(Trainable.__init__)

    class Storage:
        experiment_fs_path = "/tmp/exp"

    class Algo:
        _storage = Storage()

    assert str(internals.trial_experiment_dir(Algo())) == "/tmp/exp"
    assert internals.trial_experiment_dir(object()) is None


def test_tune_stops_gracefully_on_sigusr1():
    import ray.tune.tune as tune_module

    assert "signal.SIGUSR1, signal_interrupt_tune_run" in inspect.getsource(tune_module)


@pytest.mark.parametrize("name", ["wandb", "mlflow"])
def test_tune_logger_callbacks_read_only_what_a_trial_view_has(name):
    """An in-process trial hands Tune's logger callbacks a TrialView instead of a Trial."""
    import re

    from envsdk.config.loggers import callback_class
    from envsdk.training import logger_callbacks

    source = inspect.getsource(inspect.getmodule(callback_class(name))) + inspect.getsource(logger_callbacks)
    read = set(re.findall(r"\btrial\.(\w+)", source))
    assert read <= set(internals.TRIAL_ATTRIBUTES_READ_BY_LOGGERS), read
    view = internals.TrialView("abc_00000", "exp_abc_00000", {"lr": 1}, Path("/tmp/exp/trial"))
    assert all(hasattr(view, attribute) for attribute in internals.TRIAL_ATTRIBUTES_READ_BY_LOGGERS)
    assert str(view) == "exp_abc_00000" and view.experiment_dir_name == "exp"


def test_checkpoint_layout_of_connector_pieces(train):
    """A real checkpoint: its env-to-module pieces are where connector_pieces() looks."""
    from envsdk.training.checkpoints import locate
    from envsdk.training.observation_filter import ObservationMeanStdFilter

    out = train("--run", "PPO", "--env", "CartPole-v1", "--stop-iters", "1", "--checkpoint-at-end",
                "--config.observation_filter=MeanStdFilter", "--config.train_batch_size=200",
                "--config.minibatch_size=100")  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    checkpoint = locate(next(train.results.iterdir())).checkpoint
    pieces = internals.connector_pieces(checkpoint)
    classes = [pickle.loads((p / internals.PIECE_CLASS_FILE).read_bytes())["class"] for p in pieces]
    assert ObservationMeanStdFilter in classes
    ours = pieces[classes.index(ObservationMeanStdFilter)]
    state = pickle.loads((ours / internals.PIECE_STATE_FILE).read_bytes())
    assert state["agents"][None]["seen"][()].count > 0


RAY_FREE_RUN = """
SMALL = {  # seconds, not minutes, per iteration
    "PPO": {"train_batch_size": 256, "minibatch_size": 128, "num_epochs": 1},
    "DQN": {"min_sample_timesteps_per_iteration": 50, "num_steps_sampled_before_learning_starts": 20,
            "train_batch_size": 32},
    "SAC": {"min_sample_timesteps_per_iteration": 50, "num_steps_sampled_before_learning_starts": 20,
            "train_batch_size": 32},
}
import sys
import ray
from ray.tune.registry import get_trainable_cls
from envsdk.internals import without_object_store

name, env, folder = sys.argv[1:]
config = get_trainable_cls(name).get_default_config().environment(env).env_runners(num_env_runners=0)
config.update_from_dict(SMALL[name])
with without_object_store():
    algo = config.build_algo()
    algo.train()
    algo.save_checkpoint(folder)
    algo.load_checkpoint(folder)
    algo.train()
    algo.stop()
assert not ray.is_initialized()
"""


@pytest.mark.slow
@pytest.mark.parametrize("name", internals.RAY_FREE_ALGORITHMS)
def test_algorithms_listed_as_ray_free_train_save_and_restore_without_ray(name, tmp_path):
    """With Ray's auto-start off, any Ray call but the ones without_object_store answers would raise."""
    module, cls_name = name.split(":")
    algo_class = getattr(importlib.import_module(module), cls_name)
    assert internals.trains_without_ray(algo_class)
    env = "Pendulum-v1" if cls_name == "SAC" else "CartPole-v1"
    out = subprocess.run(
        [sys.executable, "-c", RAY_FREE_RUN, cls_name, env, str(tmp_path / "ckpt")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "RAY_ENABLE_AUTO_CONNECT": "0"},
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]


def test_algorithms_that_start_actors_are_not_ray_free():
    from ray.rllib.algorithms.appo import APPO
    from ray.rllib.algorithms.impala import IMPALA

    assert not internals.trains_without_ray(IMPALA) and not internals.trains_without_ray(APPO)
