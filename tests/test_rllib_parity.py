"""Anything stock RLlib trains, we train: RLlib's own example envs and model files, from the
installed ray wheel and unchanged, through train.py and rollout.py (one test per kind of
failure that issue 47 found; ``benchmarks/rllib_parity.py`` runs every class beside stock RLlib).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from envsdk.envs.checker import check_values
from envsdk.envs.default_models.spaces import conform
from envsdk.envs.registry import EnvFactory
from envsdk.errors import UserError
from tests.helpers import rollout_in_process, trial_dirs

EXAMPLES = "ray.rllib.examples.envs.classes"

SPACES: dict[str, gym.Space] = {
    "box": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "int-box": gym.spaces.Box(0, 9, (2,), np.int64),
    "discrete": gym.spaces.Discrete(4),
    "multi-discrete": gym.spaces.MultiDiscrete([3, 2]),
    "multi-binary": gym.spaces.MultiBinary(3),
    "tuple": gym.spaces.Tuple([gym.spaces.Box(0.0, 1.0, (2,), np.float32), gym.spaces.Discrete(3)]),
    "dict": gym.spaces.Dict(
        {"pos": gym.spaces.Box(-5.0, 5.0, (2,), np.float32), "mode": gym.spaces.Discrete(2)}
    ),
}


def _as_user_writes_it(value: Any) -> Any:
    """A valid value as users' envs return it: float64 arrays, Python lists and numbers."""
    if isinstance(value, dict):
        return {k: _as_user_writes_it(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_as_user_writes_it(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.astype(np.float64) if value.dtype.kind == "f" else value.tolist()
    return float(value)


@pytest.mark.parametrize("name", list(SPACES))
def test_values_that_fit_in_another_type_are_converted_with_a_note(name):
    space = SPACES[name]
    space.seed(0)
    value = space.sample()
    loose = _as_user_writes_it(value)
    converted, notes = conform(loose, space)
    assert space.contains(converted) and notes
    assert all(n.want for n in notes)
    again, none = conform(converted, space)
    assert none == [] and space.contains(again)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("box", np.zeros(4)),  # a wrong shape
        ("discrete", 7),  # outside the range
        ("discrete", 1.5),  # not an integer
        ("int-box", np.array([0.5, 1.0])),  # not integers
        ("tuple", [np.zeros(2)]),  # a part missing
        ("dict", {"pos": np.zeros(3), "mode": 0}),
    ],
)
def test_what_rllib_cannot_train_either_stays_a_problem(name, value):
    class One(gym.Env):
        observation_space = SPACES[name]
        action_space = gym.spaces.Discrete(2)

    verdict = check_values(One(), value, "reset()")
    assert verdict.problems, verdict


def test_a_box_value_outside_its_bounds_follows_observation_bounds():
    class One(gym.Env):
        observation_space = SPACES["box"]
        action_space = gym.spaces.Discrete(2)

    outside = np.array([0.0, 2.0, 0.0], np.float32)
    assert check_values(One(), outside, "reset()", "error").problems
    warned = check_values(One(), outside, "reset()", "warn")
    assert not warned.problems and "observation_bounds" in warned.notes[0]
    assert check_values(One(), np.array([np.nan, 0, 0], np.float32), "reset()", "warn").problems


def test_a_required_parameter_named_by_env_config_gets_it_as_a_keyword():
    from ray.rllib.examples.envs.classes.mock_env import MockEnv

    env = EnvFactory(MockEnv, "MockEnv")({"episode_length": 3})
    assert env.unwrapped.episode_length == 3
    with pytest.raises(UserError) as caught:
        EnvFactory(MockEnv, "MockEnv")({"episode_length": 3, "lenght": 2})
    assert "takes no setting 'lenght'" in str(caught.value) and "episode_length" in caught.value.hint


def test_a_required_parameter_that_no_key_names_is_listed():
    class Two:
        def __init__(self, width, height=2):
            self.width, self.height = width, height

    with pytest.raises(UserError) as caught:
        EnvFactory(Two, "Two")({"height": 4})
    assert "needs the setting width" in str(caught.value)
    assert "width, height=2" in caught.value.hint


def test_one_shared_space_becomes_every_agents_space():
    from ray.rllib.env.vector.sync_vector_multi_agent_env import SyncVectorMultiAgentEnv
    from ray.rllib.examples.envs.classes.multi_agent.two_step_game import TwoStepGame

    factory = EnvFactory(TwoStepGame, "TwoStepGame")
    vector = SyncVectorMultiAgentEnv([lambda: factory({})])  # stock RLlib: 'Discrete' is not iterable
    assert set(vector.single_observation_spaces) == {0, 1}
    assert vector.single_observation_spaces[0] == gym.spaces.Discrete(6)
    assert vector.single_action_spaces[1] == gym.spaces.Discrete(2)


# ---- trained for real: one train.py run of every experiment, joined to the session's Ray --------

SMALL = {"train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1, "num_env_runners": 0}
EXPERIMENTS = {
    # float64 observations for a float32 Box (RLlib casts them)
    "float64": {"env": f"{EXAMPLES}.correlated_actions_env.CorrelatedActionsEnv"},
    # a Tuple observation returned as nested Python lists
    "lists": {"env": f"{EXAMPLES}.windy_maze_env.WindyMazeEnv"},
    # one observation/action space declared for every agent
    "shared-space": {"env": f"{EXAMPLES}.multi_agent.two_step_game.TwoStepGame"},
    # a required constructor parameter named by env_config
    "keywords": {"env": f"{EXAMPLES}.mock_env.MockEnv", "config": {"env_config": {"episode_length": 5}}},
}


@pytest.fixture(scope="module")
def parity_runs(ray_address, tmp_path_factory) -> tuple[Any, Path]:
    from tests.helpers import train_experiments

    folder = tmp_path_factory.mktemp("parity")
    experiments = {
        name: {
            "run": "PPO",
            "env": spec["env"],
            "stop": {"training_iteration": 2},
            "config": {**SMALL, **spec.get("config", {})},
        }
        for name, spec in EXPERIMENTS.items()
    }
    return train_experiments(folder, experiments, ray_address)


def _checkpoint(results: Path, name: str) -> Path:
    (trial,) = [t for t in trial_dirs(results) if t.parent.name == name]
    return sorted(trial.glob("checkpoint_*"))[-1]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_rllib_examples_train_and_roll_out(parity_runs, name):
    out, results = parity_runs
    assert f"done: {name}:" in out.stdout
    code, stdout = rollout_in_process(_checkpoint(results, name), "--episodes", "1")
    assert code == 0 and "1 episodes |" in stdout


@pytest.mark.slow
def test_a_conversion_is_one_notice_naming_the_env_and_the_dtypes(parity_runs):
    out, _ = parity_runs
    notes = [ln for ln in out.stderr.splitlines() if "CorrelatedActionsEnv" in ln and "converted" in ln]
    assert len(notes) == 1 and "float64, converted to the space's float32" in notes[0], notes
