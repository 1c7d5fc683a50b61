"""Behavioral cloning beside PPO (envsdk/training/substitutes/ppo/cloning.py, config/own_keys/
behavioral_cloning.py): ML-Agents' schedule and loss, a real run that learns the demonstrator's
actions, and one line for each mistake before anything starts."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import yaml

from envsdk import substitutions
from envsdk.config.own_keys.behavioral_cloning import Cloning
from envsdk.training.substitutes.ppo.cloning import LR_FLOOR, BehavioralCloning
from tests.helpers import ROOT, progress_rows, rollout_in_process, run_train, trial_dirs

LEAN = ROOT / "tests" / "data" / "demos" / "cartpole_lean.py"


def _settings(**given: float) -> Cloning:
    values = {"demo_path": "x.demo", "strength": 0.5, "steps": 1000, "samples_per_update": 0}
    return Cloning(**{**values, "num_epoch": 1, "batch_size": 8, **given})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("steps", "at", "expected"),
    [(1000, 0, 1.5e-4), (1000, 500, 7.5e-5), (1000, 2000, LR_FLOOR), (0, 10**9, 1.5e-4)],
)
def test_the_learning_rate_is_the_policys_times_strength_decayed_over_steps(steps, at, expected):
    """ML-Agents: lr x strength, linear to 1e-10 over ``steps``; constant where steps is 0."""
    module = torch.nn.Linear(2, 2)
    bc = BehavioralCloning(
        module, _settings(steps=steps), np.zeros((4, 2)), np.zeros(4), gym.spaces.Discrete(2), 3e-4
    )
    assert bc.lr(at) == pytest.approx(expected, rel=1e-6)


def _experiment(tmp_path: Path, cloning: object, run: str = "PPO", **extra: object) -> Path:
    config = {
        "num_env_runners": 0,
        "train_batch_size": 500,
        "minibatch_size": 100,
        "num_epochs": 2,
        "lr": 3e-4,
    }
    experiment = {"bc": {"run": run, "env": "CartPole-v1", "checkpoint_at_end": True,
                         "config": {**config, **extra, "behavioral_cloning": cloning}}}  # fmt: skip
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    return path


@pytest.mark.slow
@pytest.mark.substitution(substitutions.PPO_LEARNER)
def test_ppo_with_cloning_learns_the_demonstrators_actions(tmp_path: Path) -> None:
    """A scripted player's .demo (rollout.py --policy --out), then PPO with behavioral_cloning: the
    cloning loss falls well under chance's and the policy plays the demonstrator's actions
    on its states far more often than chance."""
    demo = tmp_path / "lean.demo"
    code, _ = rollout_in_process(
        "--env", "CartPole-v1", "--policy", f"{LEAN}:push", "--episodes", "2", "--out", str(demo)
    )
    assert code == 0 and demo.is_file()
    path = _experiment(tmp_path, {"demo_path": "lean.demo", "strength": 3.0, "num_epoch": 8})
    out = run_train(["-f", str(path), "--stop-iters", "4", "--local-dir", str(tmp_path / "results")])
    assert out.returncode == 0, out.stderr[-3000:]
    (trial,) = trial_dirs(tmp_path / "results")
    losses = [float(r["learners/default_policy/behavioral_cloning/loss"]) for r in progress_rows(trial)]
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] <= losses[0] and losses[-1] < 0.6 * math.log(2), losses  # chance: ln 2 a step
    from ray.rllib.core.columns import Columns
    from ray.rllib.core.rl_module.rl_module import RLModule

    from envsdk.internals.checkpoint_layout import MODULE_DIR
    from unity_bridge.demo_files import read_demo

    recorded = read_demo(demo)
    module = RLModule.from_checkpoint(next(trial.glob("checkpoint_*")) / MODULE_DIR / "default_policy")
    with torch.no_grad():
        logits = module.forward_inference({Columns.OBS: torch.as_tensor(recorded.observations[0])})
    greedy = logits[Columns.ACTION_DIST_INPUTS].argmax(-1).numpy()
    agree = float(np.mean(greedy == recorded.discrete_actions[:, 0]))
    assert agree > 0.7, agree  # chance: about 0.5 (0.78-0.9 seen on a busy machine)


@pytest.mark.substitution(substitutions.PPO_LEARNER)  # stock mode refuses the key before these checks
@pytest.mark.parametrize(
    ("cloning", "run", "says"),
    [
        ({"strength": 1.0}, "PPO", "behavioral_cloning needs demo_path"),
        ({"demo_path": "missing.demo"}, "PPO", "behavioral_cloning.demo_path 'missing.demo' is not there"),
        ({"demo_path": "lean.demo", "strenght": 1.0}, "PPO", "strenght"),
        ({"demo_path": "lean.demo", "steps": -5}, "PPO", "behavioral_cloning.steps is -5"),
        ({"demo_path": "lean.demo"}, "DQN", "behavioral_cloning trains with PPO's learner in this version"),
        ({"demo_path": "lean.demo", "model_config": {"use_lstm": True}}, "PPO", "with a recurrent policy"),
    ],
)
def test_a_mistake_is_one_line_before_anything_starts(tmp_path: Path, cloning, run, says) -> None:
    (tmp_path / "lean.demo").write_bytes(b"")
    extra = {"model_config": cloning.pop("model_config")} if "model_config" in cloning else {}
    out = run_train(["-f", str(_experiment(tmp_path, cloning, run, **extra)), "--stop-iters", "1"])
    assert out.returncode == 2, out.stderr[-2000:]
    assert says in out.stderr and "Traceback" not in out.stderr
