"""Every config key RLlib calls, named by import path: imported and checked before anything starts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from envsdk.cli.train import main
from envsdk.errors import run_cli
from envsdk.training.build.callables import CALLABLES
from tests.helpers import progress_rows, trial_dirs

MODULE = textwrap.dedent(
    """
    from ray.rllib.callbacks.callbacks import RLlibCallback

    THING = 3

    def evaluate(algorithm, eval_workers):
        return {"my_score": 7.5, "nested": {"count": 2}, "note": "not a number"}, 0, 0

    def evaluate_ray1(trainer, eval_workers):  # Ray 1.x's form: the metrics alone
        return {"my_score": 3.25}

    def no_args():
        return None

    def needs_x(x):
        return x

    def anything(*args, **kwargs):
        return None

    def on_result(*, algorithm, result, **kwargs):
        result["seen"] = 1

    def curriculum(train_results, task_settable_env, env_ctx):
        return 0

    class Callbacks(RLlibCallback):
        pass

    class NeedsArgument(RLlibCallback):
        def __init__(self, x):
            super().__init__()

    class NoCallbacks:
        pass
    """
)

# key -> (a callable that fits, one that takes the wrong arguments and the words said of it)
KEYS = {
    "custom_eval_function": ("evaluate", "no_args", "cannot take the 2 arguments RLlib passes"),
    "policy_mapping_fn": ("evaluate", "needs_x", "cannot take the 2 arguments RLlib passes"),
    "policies_to_train": ("evaluate", "curriculum", "cannot take the 2 arguments RLlib passes"),
    "env_task_fn": ("curriculum", "needs_x", "cannot take the 3 arguments RLlib passes"),
    "callbacks": ("Callbacks", "NeedsArgument", "cannot take the 0 arguments RLlib passes"),
    "callbacks_on_train_result": ("on_result", "needs_x", "requires 'x', but RLlib passes only the keywords"),
    "callbacks_on_episode_end": ("anything", "on_result", "requires 'algorithm', 'result', but RLlib"),
    "observation_fn": ("anything", "needs_x", "requires 'x'"),
}


def _experiment(tmp_path: Path, config: dict) -> Path:
    (tmp_path / "cbmod.py").write_text(MODULE)
    path = tmp_path / "exp.yaml"
    exp = {"run": "PPO", "env": "CartPole-v1", "stop": {"training_iteration": 1}, "config": config}
    path.write_text(yaml.safe_dump({"cb": exp}))
    return path


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str, ref: str) -> str:
    """The one error line of a dry run of ``key: ref`` (exit 2, no fix line beyond the one)."""
    assert run_cli(main, ["-f", str(_experiment(tmp_path, {key: ref})), "--dry-run"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("notice: ")]
    assert len(lines) == 2 and lines[0].startswith("error: ") and lines[1].startswith("  fix: "), lines
    return lines[0]


def test_every_callable_key_of_rllib_is_in_the_table():
    """Each AlgorithmConfig setting typed Callable or Type that a YAML can set has its call described
    (the connector builders and ``learner_class`` of ``env_runners()``/``training()`` are no YAML
    keys: an unknown key, one line; ``input``, ``input_read_method`` and ``offline_evaluation_type``
    take names RLlib reads itself)."""
    import inspect

    from ray.rllib.algorithms.ppo import PPOConfig

    from envsdk.training.build.translate import valid_keys

    config = PPOConfig()
    typed = set()
    for name in ("callbacks", "evaluation", "multi_agent", "offline_data", "environment"):
        for param in inspect.signature(getattr(config, name)).parameters.values():
            if "Callable" in str(param.annotation) or "Type[" in str(param.annotation):
                typed.add({"custom_evaluation_function": "custom_eval_function"}.get(param.name, param.name))
    plain = {"input_", "input_read_method", "offline_evaluation_type", "env", "callbacks_class"}
    settable = valid_keys(config)
    for name in typed - plain:
        key = name if name in settable else f"callbacks_{name}"
        assert key in CALLABLES or key.startswith("callbacks_on_"), key
    assert "callbacks" in CALLABLES


@pytest.mark.parametrize("key", list(KEYS))
def test_a_callable_that_fits_is_accepted(tmp_path, capsys, key):
    good, _, _ = KEYS[key]
    config = {key: f"cbmod.{good}", "evaluation_interval": 1}
    assert run_cli(main, ["-f", str(_experiment(tmp_path, config)), "--dry-run"]) == 0, (
        capsys.readouterr().err
    )


@pytest.mark.parametrize("key", list(KEYS))
def test_a_wrong_path_is_one_line(tmp_path, capsys, key):
    line = _refused(tmp_path, capsys, key, "cbmod.missing")
    named = {"env_task_fn": "curriculum"}.get(key, key)  # Ray 1.x's name, said as today's
    assert "exp.yaml:" in line and f"module 'cbmod' has no {named} 'missing'" in line
    line = _refused(tmp_path, capsys, key, "nomodule.fn")
    assert "no module 'nomodule'" in line


@pytest.mark.parametrize("key", list(KEYS))
def test_what_is_not_callable_is_one_line(tmp_path, capsys, key):
    line = _refused(tmp_path, capsys, key, "cbmod.THING")
    assert "'cbmod.THING' is a int (3), not a" in line


@pytest.mark.parametrize("key", list(KEYS))
def test_a_callable_of_the_wrong_arity_is_one_line(tmp_path, capsys, key):
    _, wrong, said = KEYS[key]
    assert said in _refused(tmp_path, capsys, key, f"cbmod.{wrong}")


def test_a_callbacks_class_must_be_rllibs(tmp_path, capsys):
    assert "is no RLlibCallback" in _refused(tmp_path, capsys, "callbacks", "cbmod.NoCallbacks")


@pytest.mark.slow
@pytest.mark.parametrize(("function", "score"), [("evaluate", 7.5), ("evaluate_ray1", 3.25)])
def test_custom_eval_function_by_path_is_called_and_reported(train, tmp_path, function, score):
    config = {
        "custom_eval_function": f"cbmod.{function}",
        "evaluation_interval": 1,
        "num_env_runners": 0,
        "train_batch_size": 128,
        "minibatch_size": 64,
        "num_epochs": 1,
    }
    out = train("-f", str(_experiment(tmp_path, config)), cwd=tmp_path, timeout=240)
    assert out.returncode == 0
    (trial,) = trial_dirs(train.results)
    (row,) = progress_rows(trial)
    assert float(row["evaluation/my_score"]) == score
