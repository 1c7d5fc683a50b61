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
from envsdk.envs.registry import EnvFactory
from envsdk.envs.spaces import conform
from envsdk.errors import UserError
from tests.helpers import rollout_in_process, trial_dirs

EXAMPLES = "ray.rllib.examples.envs.classes"
MODELS = "ray.rllib.examples." + "_old_api_stack.models"  # RLlib's example ModelV2 files

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


# ---- model files as RLlib's authors write them ---------------------------------------------------

RLM_CLASSES = Path(__import__("ray.rllib.examples.rl_modules.classes", fromlist=["x"]).__file__).parent


def _models(tmp_path: Path, *files: str) -> list[Path]:
    """RLlib's own model files, copied unchanged into a models/ folder (none is committed here)."""
    folder = tmp_path / "models"
    folder.mkdir(exist_ok=True)
    for name in files:
        (folder / f"{name}.py").write_text((RLM_CLASSES / f"{name}.py").read_text())
    return [folder]


@pytest.mark.parametrize(
    ("name", "chosen"),
    [
        ("action_masking_rlm", "ActionMaskingTorchRLModule"),  # a base class and its torch subclass
        ("lstm_containing_rlm", "LSTMContainingRLModuleWithTargetNetwork"),  # a module and its subclass
        ("vpg_using_shared_encoder_rlm.SharedEncoder", "SharedEncoder"),  # file.ClassName
        (
            "ray.rllib.examples.rl_modules.classes.vpg_torch_rlm.VPGTorchRLModule",
            "VPGTorchRLModule",
        ),  # import path
    ],
)
def test_a_model_file_resolves_to_its_one_concrete_class(tmp_path, name, chosen):
    from envsdk.networks.plugins import load_model

    paths = _models(tmp_path, "action_masking_rlm", "lstm_containing_rlm", "vpg_using_shared_encoder_rlm")
    assert load_model(name, paths).cls.__name__ == chosen


def test_a_real_ambiguity_lists_the_file_class_choices(tmp_path):
    from envsdk.networks.plugins import load_model

    with pytest.raises(UserError) as caught:
        load_model("vpg_using_shared_encoder_rlm", _models(tmp_path, "vpg_using_shared_encoder_rlm"))
    assert "vpg_using_shared_encoder_rlm.VPGPolicyNoSharedEncoder" in caught.value.hint
    with pytest.raises(UserError) as caught:
        load_model("vpg_using_shared_encoder_rlm.NoSuch", _models(tmp_path, "vpg_using_shared_encoder_rlm"))
    assert "has no model class NoSuch" in str(caught.value)


def test_a_name_registered_with_rllibs_model_catalog_is_honoured(tmp_path):
    from ray.rllib.models import ModelCatalog

    from envsdk.networks.plugins import PROJECT_MODELS, load_model

    model_class = load_model("customnet", [PROJECT_MODELS]).cls  # a TorchModelV2
    ModelCatalog.register_custom_model("parity_registered_model", model_class)
    plugin = load_model("parity_registered_model", [tmp_path])
    assert plugin.cls is model_class and plugin.is_modelv2


def test_a_module_without_the_value_function_its_algorithm_learns_from_is_refused(tmp_path, capsys):
    import yaml

    from envsdk.cli.train import main
    from envsdk.errors import run_cli

    _models(tmp_path, "vpg_torch_rlm")  # RLlib's VPG module: no value function (PPO fails at its update)
    exp = {"run": "PPO", "env": "CartPole-v1", "config": {"model": {"custom_model": "vpg_torch_rlm"}}}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({"vpg": exp}))
    assert run_cli(main, ["-f", str(tmp_path / "exp.yaml"), "--dry-run"]) == 2
    err = [ln for ln in capsys.readouterr().err.splitlines() if not ln.startswith("notice:")]
    assert "has no value function, which PPO learns from" in err[0] and "ValueFunctionAPI" in err[1]


def test_a_key_the_module_reads_and_nobody_set_is_one_error_line(tmp_path):
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.core.rl_module.rl_module import RLModuleSpec

    from envsdk.networks.choice import check_modules
    from envsdk.networks.plugins import load_model

    plugin = load_model("vpg_torch_rlm", _models(tmp_path, "vpg_torch_rlm"))
    env = gym.make("CartPole-v1")
    config = PPOConfig().environment(observation_space=env.observation_space, action_space=env.action_space)
    config.rl_module(rl_module_spec=RLModuleSpec(module_class=plugin.cls))
    with pytest.raises(UserError) as caught:
        check_modules(config, env, {"agent": env.reset(seed=0)[0]}, {}, "vpg_torch_rlm")
    assert "reads the setting 'hidden_dim'" in str(caught.value)
    assert "custom_model_config: {hidden_dim: ...}" in caught.value.hint


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
    # no episode ever ends (no time limit, no terminal state)
    "never-ends": {"env": f"{EXAMPLES}.stateless_pendulum.StatelessPendulum"},
    # gymnasium spaces written into env_config by the env's constructor
    "spaces-in-env-config": {"env": f"{EXAMPLES}.random_env.RandomLargeObsSpaceEnvContActions"},
    # RLlib's stateful module file (a module and its subclass), copied into models/
    "model-file": {"env": "CartPole-v1", "config": {"model": {"custom_model": "lstm_containing_rlm"}}},
    # RLlib's Repeated observations (lists of varying length), with RLlib's own ModelV2 for them
    "repeated": {
        "env": f"{EXAMPLES}.simple_rpg.SimpleRPG",
        "config": {
            "model": {
                "custom_model": "ray.rllib.examples."
                + "_old_api_stack.models.simple_rpg_model.CustomTorchRPGModel"
            }
        },
    },
    # a ModelV2 by its import path, whose constructor takes RLlib's positional arguments only
    "modelv2-path": {
        "env": "CartPole-v1",
        "config": {"model": {"custom_model": MODELS + ".shared_weights_model.TorchSharedWeightsModel"}},
    },
    # a ModelV2 registered with ModelCatalog.register_custom_model by the env's module
    "registered-model": {
        "env": "registering_env.RegisteringEnv",
        "config": {"model": {"custom_model": "my_model"}},
    },
}

REGISTERING_ENV = """
import gymnasium as gym
from ray.rllib.examples._old_api_stack.models.shared_weights_model import TorchSharedWeightsModel
from ray.rllib.models import ModelCatalog

ModelCatalog.register_custom_model("my_model", TorchSharedWeightsModel)


class RegisteringEnv(gym.Wrapper):
    def __init__(self, config=None):
        super().__init__(gym.make("CartPole-v1"))
"""


@pytest.fixture(scope="module")
def parity_runs(ray_address, tmp_path_factory) -> tuple[Any, Path]:
    from tests.helpers import train_experiments

    folder = tmp_path_factory.mktemp("parity")
    _models(folder, "lstm_containing_rlm")
    (folder / "registering_env.py").write_text(REGISTERING_ENV)
    experiments = {  # each also with every substitution off (envsdk/substitutions.py): stock RLlib
        name + suffix: {
            "run": "PPO",
            "env": spec["env"],
            "stop": {"training_iteration": 2},
            "config": {**SMALL, **spec.get("config", {}), **stock},
        }
        for name, spec in EXPERIMENTS.items()
        for suffix, stock in (("", {}), ("-stock", {"stock": True}))
    }
    return train_experiments(folder, experiments, ray_address)


def _checkpoint(results: Path, name: str) -> Path:
    (trial,) = [t for t in trial_dirs(results) if t.parent.name == name]
    return sorted(trial.glob("checkpoint_*"))[-1]


@pytest.mark.slow
@pytest.mark.parametrize("name", [name + suffix for name in EXPERIMENTS for suffix in ("", "-stock")])
def test_rllib_examples_train_and_roll_out(parity_runs, name):
    out, results = parity_runs
    assert f"done: {name}:" in out.stdout
    code, stdout = rollout_in_process(_checkpoint(results, name), "--episodes", "1")
    assert code == 0 and "1 episodes |" in stdout


@pytest.mark.slow
def test_observations_of_varying_shape_reach_the_experience_file(parity_runs, tmp_path):
    import json

    _, results = parity_runs
    out = tmp_path / "rpg.npz"
    code, _ = rollout_in_process(_checkpoint(results, "repeated"), "--episodes", "1", "--out", out)
    assert code == 0
    with np.load(out) as data:
        steps = [json.loads(text) for text in data["ep0000/agent/obs_json"]]
    assert steps and set(steps[0][0]) == {"effects", "items", "location", "status"}


@pytest.mark.slow
def test_training_that_sees_no_episode_end_says_so_and_names_horizon(parity_runs):
    from envsdk.progress import NO_EPISODE_END

    out, _ = parity_runs
    (done,) = [ln for ln in out.stdout.splitlines() if ln.startswith("done: never-ends:")]
    assert NO_EPISODE_END in done and "horizon" in done


@pytest.mark.slow
def test_rollout_ends_an_episode_that_never_ends_at_its_cap_and_says_why(parity_runs, tmp_path):
    _, results = parity_runs
    out = tmp_path / "never.npz"
    code, stdout = rollout_in_process(
        _checkpoint(results, "never-ends"), "--episodes", "1", "--max-episode-steps", "60", "--out", out
    )
    assert code == 0, stdout
    assert "episode 1: return" in stdout and "length 60 [ended by the cap of 60 steps" in stdout
    with np.load(out) as data:
        assert data["ep0000/agent/rewards"].shape == (60,)


def test_rollout_caps_only_envs_without_a_time_limit_of_their_own():
    from envsdk.envs.time_limit import own_limit
    from envsdk.evaluation.evaluator import DEFAULT_EPISODE_CAP, EnvCreator, EvalSpec

    def creator(steps: int | None) -> EnvCreator:
        return EnvCreator(EvalSpec(restored=None, max_episode_steps=steps), 0)  # type: ignore[arg-type]

    assert creator(None).cap(gym.make("CartPole-v1")) is None  # its own 500
    from ray.rllib.examples.envs.classes.simple_corridor import SimpleCorridor

    assert creator(None).cap(SimpleCorridor({})) == DEFAULT_EPISODE_CAP
    assert creator(25).cap(gym.make("CartPole-v1")) == 25
    assert own_limit(gym.make("CartPole-v1")) == 500


@pytest.mark.slow
def test_a_conversion_is_one_notice_naming_the_env_and_the_dtypes(parity_runs):
    out, _ = parity_runs
    notes = [ln for ln in out.stderr.splitlines() if "CorrelatedActionsEnv" in ln and "converted" in ln]
    assert len(notes) == 1 and "float64, converted to the space's float32" in notes[0], notes


class _FailsFirst(gym.Env):
    """Its first instance raises in its first step (a flaky simulator); it reads the EnvContext's
    worker_index as RLlib's CartPoleCrashing does."""

    built = 0
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config):
        type(self).built += 1
        self.first = type(self).built == 1
        self.worker = config.worker_index

    def reset(self, *, seed=None, options=None):
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if self.first:
            raise RuntimeError("simulator lost")
        return np.zeros(2, np.float32), 0.0, False, False, {}


@pytest.mark.parametrize("tries", [1, 3])
def test_the_start_up_check_builds_a_failing_env_again_where_restarts_are_asked_for(tries, capsys):
    from envsdk.envs.checker import preflight
    from envsdk.envs.registry import ResolvedEnv

    _FailsFirst.built = 0
    resolved = ResolvedEnv("fails-first", EnvFactory(_FailsFirst, "fails-first"), "class")
    if tries == 1:
        with pytest.raises(UserError, match="failed in step"), preflight(resolved, {}, tries=tries):
            pass
        return
    with preflight(resolved, {}, tries=tries) as (env, _):
        assert env.unwrapped.worker == 0 and _FailsFirst.built == 2
    assert "building it again, as the restart settings ask" in capsys.readouterr().err


# ---- a crashing env: RLlib's restarts on our sampler and RLlib's, and one line without them ------

CRASH_LOGGING_ENV = """
import traceback
from pathlib import Path

from ray.rllib.examples.envs.classes.cartpole_crashing import CartPoleCrashing
from ray.rllib.utils.error import EnvError


class LoggedCrashes(CartPoleCrashing):
    # RLlib's CartPoleCrashing, with each crash written to a file the test counts: "start-up" for a
    # crash in envsdk's start-up check (its one step, in the driver: rebuilt, never counted as a
    # restart), "runner" for the others.  Random crashes may miss a short run (0.985 ** 200 is 5%),
    # so the crashing runner's env also raises at its 20th step while no runner crash is logged:
    # the first crash is certain, the later ones RLlib's.
    def __init__(self, config=None):
        super().__init__(config)
        self.steps_taken = 0
        self.log = Path(self.config["crash_log"])

    def step(self, action):
        self.steps_taken += 1
        try:
            if self.p_crash and self.steps_taken == 20 and "runner" not in self.logged():
                raise EnvError("Simulated first crash")
            return super().step(action)
        except EnvError:
            startup = any(frame.name == "preflight" for frame in traceback.extract_stack())
            with self.log.open("a") as log:
                log.write("start-up\\n" if startup else "runner\\n")
            raise

    def logged(self):
        return self.log.read_text().split() if self.log.exists() else []
"""
CRASHING = f"{EXAMPLES}.cartpole_crashing.CartPoleCrashing"


@pytest.fixture(scope="module")
def crash_runs(ray_address, tmp_path_factory) -> tuple[Any, Path]:
    from tests.helpers import train_experiments

    folder = tmp_path_factory.mktemp("crashes")
    (folder / "crash_env.py").write_text(CRASH_LOGGING_ENV)
    # RLlib's own switch: only runner 1 (remote) or the local runner 0 crashes, so that every iteration
    # samples something (an env that crashes everywhere before any sample ends the run: tests below)
    remote = {
        "num_env_runners": 2,
        "restart_failed_env_runners": True,
        "delay_between_env_runner_restarts_s": 1,
    }
    local = {"num_env_runners": 0, "restart_failed_sub_environments": True}
    experiments = {
        name: {
            "run": "PPO",
            "env": "crash_env.LoggedCrashes",
            "stop": {"num_env_steps_sampled_lifetime": 400, "training_iteration": 20},
            "config": {
                **SMALL,
                **runners,
                **({"sampler": "rllib"} if sampler == "rllib" else {}),
                **({"stock": True} if sampler == "stock" else {}),
                "env_config": {
                    "p_crash": 0.015,
                    "crash_on_worker_indices": [runners["num_env_runners"] and 1],
                    "crash_log": str(folder / f"{name}.log"),
                },
            },
        }
        for name, runners, sampler in [
            ("remote-batched", remote, "batched"),
            ("remote-rllib", remote, "rllib"),
            ("remote-stock", remote, "stock"),  # every substitution off: envsdk/substitutions.py
            ("local-batched", local, "batched"),
            ("local-rllib", local, "rllib"),
            ("local-stock", local, "stock"),
        ]
    }
    out, _ = train_experiments(folder, experiments, ray_address)
    return out, folder


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["remote-batched", "remote-rllib", "remote-stock", "local-batched", "local-rllib", "local-stock"]
)
def test_a_crashing_env_with_restarts_trains_on_and_its_restarts_are_counted(crash_runs, name):
    import re

    out, folder = crash_runs
    block = out.stdout[out.stdout.index(f"done: {name}:") :].split("\n  results:")[0]
    assert re.match(rf"done: {name}: return [\d.]+ after ([4-9]\d\d|[\d,]{{5,}}) env steps", block), block
    log = folder / f"{name}.log"
    crashes = log.read_text().split().count("runner") if log.exists() else 0
    assert crashes >= 1, "the crashing runner's env raises at its 20th step while no runner crash is logged"
    counted = re.search(r"(\d+) restarts" if name.startswith("remote") else r"(\d+) envs recreated", block)
    assert counted and int(counted.group(1)) == crashes, (block, crashes)


@pytest.mark.slow
@pytest.mark.substitution("env-guard")  # its EnvRaised names the env's error
@pytest.mark.parametrize(
    ("env", "runners", "raised"),
    [
        (CRASHING, 1, "raised EnvError: Simulated env crash"),  # a remote runner, RLlib's restarts
        (
            f"{EXAMPLES}.ten_step_error_env.TenStepErrorEnv",
            0,
            "raised Exception: Test error in step() at step",
        ),
        (f"{EXAMPLES}.look_and_push.LookAndPush", 0, "returns (obs, reward, terminated, truncated, info))"),
    ],
    ids=["crash-remote", "raises", "wrong-arity"],
)
def test_an_env_that_raises_ends_the_run_with_one_line_naming_it(ray_address, tmp_path, env, runners, raised):
    import yaml

    from tests.helpers import run_train

    config = {
        **SMALL,
        "num_env_runners": runners,
        "env_config": {"p_crash": 0.05, "crash_on_worker_indices": [1]},
        "delay_between_env_runner_restarts_s": 1,  # RLlib's 60 s wait before its default restart
    }
    exp = {"run": "PPO", "env": env, "stop": {"training_iteration": 3}, "config": config}
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump({"faulty": exp}))
    out = run_train(["-f", "exp.yaml", "--ray-address", ray_address, "--local-dir", "results"], cwd=tmp_path)
    assert out.returncode != 0
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("  trial failed:")]
    name = env.rsplit(".", 1)[1]
    runner = "env runner 1" if runners else "the local env runner"
    assert f"EnvRaised: env '{env}' ({runner})" in line and raised in line, line
    assert "restart_failed_sub_environments" in line and "Traceback" not in out.stdout, (name, line)
