"""User mistakes exit with status 2 and a short message naming the problem and the fix."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from envsdk.cli.train import main
from envsdk.errors import run_cli
from tests.helpers import ROOT


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def run(argv, capsys):
    code = run_cli(main, [*argv, "--dry-run"])
    err = capsys.readouterr().err
    return code, [ln for ln in err.splitlines() if not ln.startswith("notice:")]


CASES = {
    "bad-yaml": ("exp:\n  run: PPO\n  env: CartPole-v1\n   config: {lr: 1}\n", ["invalid YAML", "bad.yaml:"]),
    "unknown-key": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config:\n    num_env_runners: 0\n    lrr: 0.1\n",
        ["unknown config key 'lrr'", "bad.yaml:6", "'lr'"],
    ),
    "unknown-exp-key": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  stopp: {}\n",
        ["unknown experiment key 'stopp'", "'stop'"],
    ),
    "unknown-algo": ("exp:\n  run: PPPO\n  env: CartPole-v1\n", ["unknown algorithm 'run: PPPO'", "PPO"]),
    "algo-case": ("exp:\n  run: ppo\n  env: CartPole-v1\n", ["did you mean 'PPO'"]),
    "no-module": ("exp:\n  run: PPO\n  env: nosuch_module.Env\n", ["cannot import env", "nosuch_module"]),
    "unknown-env": ("exp:\n  run: PPO\n  env: CartPol-v1\n", ["unknown env 'CartPol-v1'", "CartPole-v1"]),
    "missing-model": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config:\n    model: {custom_model: nosuchnet}\n",
        ["custom_model 'nosuchnet'", "customnet", "tinynet"],
    ),
    "bad-model-option": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config:\n    model:\n      custom_model: customnet\n"
        "      custom_model_config: {hiden_size: 3}\n",
        ["no option 'hiden_size'", "hidden_size"],
    ),
    "bad-rlmodule-option": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config:\n    model:\n      custom_model: tinynet\n"
        "      custom_model_config: {hiden: 3}\n",
        ["no option 'hiden'", "hidden"],
    ),
    "removed-key": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config: {num_gpus_per_learner_worker_fractional: true}\n",
        ["'num_gpus_per_learner_worker_fractional' was removed", "num_gpus_per_learner"],
    ),
    "removed-algo": (
        "exp:\n  run: DDPG\n  env: Pendulum-v1\n",
        ["'run: DDPG' was removed", "the nearest is SAC"],
    ),
    "exploration": (
        "exp:\n  run: DQN\n  env: CartPole-v1\n  config:\n    exploration_config: {type: SoftQ}\n",
        ["type 'SoftQ' has no equivalent", "epsilon"],
    ),
    "filter": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config: {observation_filter: MyFilter}\n",
        ["observation_filter 'MyFilter'", "MeanStdFilter"],
    ),
    "normalize-rewards-replay": (
        "exp:\n  run: DQN\n  env: CartPole-v1\n  config: {normalize_rewards: true}\n",
        ["normalize_rewards works with PPO, APPO, IMPALA, not DQN", "bad.yaml:4"],
    ),
    "normalize-rewards-not-bool": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config: {normalize_rewards: 'yes please'}\n",
        ["normalize_rewards must be true or false"],
    ),
    "normalize-rewards-modelv2": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config:\n    normalize_rewards: true\n"
        "    model: {custom_model: customnet}\n",
        ["normalize_rewards needs the new API stack", "RLModule"],
    ),
    "vectorize-mode": (
        "exp:\n  run: SAC\n  env: Pendulum-v1\n  config: {gym_env_vectorize_mode: vector_entry_point}\n",
        ["env 'Pendulum-v1' has no vectorized version", "bad.yaml:4", "drop the key"],
    ),
    "rllib-rejects": (
        "exp:\n  run: PPO\n  env: CartPole-v1\n  config: {train_batch_size: 100, minibatch_size: 500}\n",
        ["RLlib rejected the config"],
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_user_mistakes_exit_2(tmp_path, capsys, case):
    text, expected = CASES[case]
    code, lines = run(["-f", str(write(tmp_path, "bad.yaml", text))], capsys)
    assert code == 2
    assert 1 <= len(lines) <= 2, lines
    message = "\n".join(lines)
    for fragment in expected:
        assert fragment in message, (fragment, message)
    assert "Traceback" not in message


def test_env_whose_spaces_do_not_match(tmp_path, capsys):
    write(
        tmp_path,
        "wrong_env.py",
        """
        import numpy as np
        from gymnasium import spaces
        import envsdk

        class Wrong(envsdk.Env):
            def __init__(self, config=None):
                super().__init__(config)
                self.observation_space = spaces.Box(-1, 1, shape=(4,), dtype=np.float32)
                self.action_space = spaces.Discrete(2)
            def reset(self, *, seed=None, options=None):
                return np.zeros(3, dtype=np.float32), {}
            def step(self, action):
                return np.zeros(3, dtype=np.float32), 0.0, True, False, {}
    """,
    )
    cfg = write(tmp_path, "exp.yaml", "exp:\n  run: PPO\n  env: wrong_env.Wrong\n")
    code, lines = run(["-f", str(cfg)], capsys)
    assert code == 2
    assert "reset() observation: shape (3,) but the space says (4,)" in lines[0]


@pytest.mark.slow
def test_cli_exit_code_and_debug_traceback(tmp_path):
    cfg = write(tmp_path, "exp.yaml", "exp:\n  run: PPO\n  env: CartPole-v1\n  config: {lrr: 1}\n")
    cmd = [sys.executable, str(ROOT / "train.py"), "-f", str(cfg), "--dry-run"]
    plain = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path)
    assert plain.returncode == 2
    assert "Traceback" not in plain.stderr and "unknown config key 'lrr'" in plain.stderr
    debug = subprocess.run([*cmd, "--debug"], capture_output=True, text=True, cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_unknown_flag_and_missing_file(capsys):
    assert run_cli(main, ["-f", "nope.yaml"]) == 2
    assert "config file not found: nope.yaml" in capsys.readouterr().err
    assert run_cli(main, ["-f", "configs/cartpole-ppo.yaml", "--bogus=1"]) == 2
    assert "unknown argument '--bogus=1'" in capsys.readouterr().err


TF_MODELS = {
    "imports-tensorflow": "import tensorflow as tf\n\nclass CustomModel(tf.keras.Model):\n    pass\n",
    "tfmodelv2": (
        "from ray.rllib.models.tf.tf_modelv2 import TFModelV2\n\nclass CustomModel(TFModelV2):\n    pass\n"
    ),
}


@pytest.mark.parametrize("kind", sorted(TF_MODELS))
def test_a_tf_custom_model_is_an_error_naming_the_port(tmp_path, capsys, kind):
    (tmp_path / "models").mkdir()
    write(tmp_path / "models", "tfnet.py", TF_MODELS[kind])
    cfg = write(tmp_path, "exp.yaml", "exp:\n  run: PPO\n  env: CartPole-v1\n  config:\n    framework: tf\n"
                "    model: {custom_model: tfnet}\n")  # fmt: skip
    code, lines = run(["-f", str(cfg)], capsys)
    assert code == 2 and len(lines) == 2, lines
    assert "custom_model 'tfnet'" in lines[0] and "is a TF model" in lines[0]
    assert "port it to torch" in lines[1]


def _chained(outer: BaseException, *inner: BaseException) -> BaseException:
    """``outer`` raised from ``inner[0]``, raised from ``inner[1]``, ... (as ``raise ... from``)."""
    for err, cause in zip((outer, *inner), inner, strict=False):
        err.__cause__ = cause
    return outer


def _ray_error(remote: BaseException) -> BaseException:
    """What a Tune trial's actor error is: Ray's RayTaskError, whose cause arrives pickled (no chain)
    and whose text is the remote traceback."""
    import pickle
    import traceback

    from ray.exceptions import RayTaskError

    text = "".join(traceback.format_exception(remote))
    return RayTaskError("PPO.train", text, pickle.loads(pickle.dumps(remote))).as_instanceof_cause()


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("fault-in-the-chain", "EnvKeepsFailing: the env kept failing"),
        ("fault-through-ray", "EnvKeepsFailing: the env kept failing"),
        ("bare-rethrow-through-ray", "ValueError: sensor 3 disconnected"),
        ("bare-rethrow", "ValueError: sensor 3 disconnected"),
        ("plain", "KeyError: 'obs'"),
    ],
)
def test_a_trials_error_is_said_in_one_line_naming_the_fault(case, said):
    """The run's summary line: the fault that names itself however deep in the chain, through Ray's
    actor errors (a trial in Tune's actor) too, else the chain's innermost error (root_cause's rule)."""
    from envsdk.errors import one_line
    from envsdk.training.run.tune_runner import _first_line
    from envsdk.training.substitutes.sampling.batched_runner import EnvKeepsFailing

    def fault() -> BaseException:
        kept_failing = EnvKeepsFailing("the env kept failing")
        return _chained(RuntimeError(), kept_failing, ValueError("sensor 3 disconnected"))

    errors = {
        "fault-in-the-chain": lambda: one_line(fault()),
        "fault-through-ray": lambda: _first_line(_ray_error(fault())),
        "bare-rethrow-through-ray": lambda: _first_line(
            _ray_error(_chained(RuntimeError(), ValueError("sensor 3 disconnected")))
        ),
        "bare-rethrow": lambda: one_line(_chained(RuntimeError(), ValueError("sensor 3 disconnected"))),
        "plain": lambda: _first_line(_ray_error(KeyError("obs"))),
    }
    assert errors[case]() == said
