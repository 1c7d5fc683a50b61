"""Reward signals in PPO (envsdk/training/substitutes/ppo/signals.py and learner.py): each signal's
GAE with its own gamma, as ML-Agents computes it per trajectory, and a real run's columns."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from envsdk import substitutions
from envsdk.config.own_keys.reward_signals import RewardSignals, Signal
from envsdk.training.substitutes.ppo.signals import signal_value_targets
from tests.helpers import ROOT, progress_rows, rollout_in_process, run_train, trial_dirs

LAMBDA = 0.9


def _ml_agents_gae(rewards: np.ndarray, values: np.ndarray, bootstrap: float, gamma: float) -> np.ndarray:
    """ML-Agents' get_gae over one trajectory: deltas with the next value (``bootstrap`` after
    the last step), discounted by gamma * lambda."""
    following = np.append(values[1:], bootstrap)
    deltas = rewards + gamma * following - values
    advantages: np.ndarray = np.zeros_like(deltas)
    running = 0.0
    for t in reversed(range(len(deltas))):
        running = deltas[t] + gamma * LAMBDA * running
        advantages[t] = running
    return advantages


@pytest.mark.parametrize(
    "ends", [("terminated", "truncated"), ("truncated", "terminated"), ("terminated", "terminated")]
)
@pytest.mark.parametrize(("gammas", "strengths"), [((0.99, 0.9), (1.0, 0.02)), ((0.5, 0.999), (0.3, 2.0))])
@pytest.mark.parametrize("intrinsic", ["curiosity", "rnd"])
def test_each_signal_is_discounted_by_its_gamma_and_summed(
    ends: tuple[str, str], gammas: tuple[float, float], strengths: tuple[float, float], intrinsic: str
) -> None:
    """Two episodes in RLlib's layout (each with its bootstrap row): the targets less the values,
    summed over signals, are ML-Agents' per-signal GAE summed; the intrinsic signal bootstraps from
    the last observation even where the episode terminated (ML-Agents' ignore_done)."""
    rng = np.random.default_rng(0)
    lengths = (5, 3)
    signals = RewardSignals(
        tuple(
            Signal(name=n, gamma=g, strength=s)
            for n, g, s in zip(("extrinsic", intrinsic), gammas, strengths, strict=True)
        )
    )
    rows = sum(n + 1 for n in lengths)
    values = rng.normal(size=(rows, 2)).astype(np.float32)
    raw = rng.normal(size=(rows, 2)).astype(np.float32)
    terminated, truncated = np.zeros(rows, np.float32), np.zeros(rows, np.float32)
    start = 0
    for n, end in zip(lengths, ends, strict=True):
        (terminated if end == "terminated" else truncated)[start + n - 1] = 1.0
        raw[start + n] = 0.0  # the bootstrap row: RLlib's reward there is 0
        start += n + 1
    scaled = raw * np.asarray(strengths, np.float32)
    targets = signal_value_targets(values, scaled, terminated, truncated, signals, LAMBDA)
    summed = (targets - values).sum(axis=1)
    start = 0
    for n, end in zip(lengths, ends, strict=True):
        expected = np.zeros(n, np.float32)
        for i, signal in enumerate(signals.signals):
            here = slice(start, start + n)
            cut = end == "terminated" and not signal.ignore_done
            bootstrap = 0.0 if cut else float(values[start + n, i])
            expected += _ml_agents_gae(scaled[here, i], values[here, i], bootstrap, signal.gamma)
        np.testing.assert_allclose(summed[start : start + n], expected, rtol=1e-5, atol=1e-5)
        start += n + 1


@pytest.mark.slow
@pytest.mark.substitution(substitutions.PPO_LEARNER)
@pytest.mark.parametrize("memory", [False, True])
def test_ppo_with_curiosity_and_rnd_trains_reports_and_restores(tmp_path: Path, memory: bool) -> None:
    """Two iterations on CartPole (an LSTM's batch in padded sequences too): every signal's reward
    and loss is a progress.csv column of finite numbers, and the checkpoint plays and exports."""
    experiment = {
        "signals": {
            "run": "PPO",
            "env": "CartPole-v1",
            "checkpoint_at_end": True,
            "config": {
                "num_env_runners": 0,
                "num_envs_per_env_runner": 4,
                "train_batch_size": 256,
                "minibatch_size": 64,
                "num_epochs": 2,
                "gamma": 0.98,
                **({"model_config": {"use_lstm": True, "max_seq_len": 8}} if memory else {}),
                "reward_signals": {
                    "extrinsic": {"strength": 1.0},
                    "curiosity": {"strength": 0.02, "learning_rate": 1e-3},
                    "rnd": {"strength": 0.01, "gamma": 0.9, "network_settings": {"normalize": True}},
                },
            },
        }
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    out = run_train(["-f", str(path), "--stop-iters", "2", "--local-dir", str(tmp_path / "results")])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "a value per reward signal: extrinsic, curiosity, rnd" in out.stdout
    (trial,) = trial_dirs(tmp_path / "results")
    rows = progress_rows(trial)
    assert len(rows) == 2
    prefix = "learners/default_policy/reward_signals"
    columns = [
        f"{prefix}/{name}" for name in (
            "extrinsic/reward_mean", "curiosity/reward_mean", "curiosity/forward_loss",
            "curiosity/inverse_loss", "rnd/reward_mean", "rnd/loss",
        )
    ]  # fmt: skip
    for row in rows:
        for column in columns:
            assert math.isfinite(float(row[column])), (column, row.get(column))
    assert float(rows[-1][f"{prefix}/extrinsic/reward_mean"]) == 1.0  # CartPole: 1 a step
    assert (
        float(rows[-1]["learners/default_policy/vf_loss"]) > 0
    )  # the heads', not RLlib's loss without critic
    assert float(rows[-1][f"{prefix}/curiosity/reward_mean"]) > 0
    checkpoint = next(trial.glob("checkpoint_*"))
    code, played = rollout_in_process(str(checkpoint), "--episodes", "1")
    assert code == 0
    assert "episode 1: return" in played
    if not memory:  # the policy alone goes to ONNX, not its signals' models
        code, _ = rollout_in_process(str(checkpoint), "--export-onnx", str(tmp_path / "policy.onnx"))
        assert code == 0 and (tmp_path / "policy.onnx").is_file()


@pytest.mark.slow
@pytest.mark.substitution(substitutions.PPO_LEARNER)
def test_the_envs_reward_alone_at_another_strength_and_gamma_takes_its_own_head(tmp_path: Path) -> None:
    """extrinsic at strength 0.5 and gamma 0.9 (the run's 0.99), no signal model: its one value head
    and GAE with its own gamma on the halved reward, not RLlib's GAE on the env's."""
    config = {"num_env_runners": 0, "train_batch_size": 256, "minibatch_size": 64, "num_epochs": 1}
    signals = {"extrinsic": {"strength": 0.5, "gamma": 0.9}}
    experiment = {
        "half": {"run": "PPO", "env": "CartPole-v1", "config": {**config, "reward_signals": signals}}
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    out = run_train(["-f", str(path), "--stop-iters", "1", "--local-dir", str(tmp_path / "results")])
    assert out.returncode == 0, out.stderr[-3000:]
    assert "a value per reward signal: extrinsic" in out.stdout
    (row,) = progress_rows(trial_dirs(tmp_path / "results")[0])
    assert float(row["learners/default_policy/reward_signals/extrinsic/reward_mean"]) == 0.5
    assert 0 < float(row["learners/default_policy/vf_loss"]) < 10  # returns of at most 0.5 / (1 - 0.9)


def _write_demo(path: Path, width: int, rows: int = 40) -> None:
    """A demonstration of ``width`` observations and one Discrete(2) branch."""
    from unity_bridge.demo_files import Demonstration, write_demo

    obs = np.random.default_rng(0).normal(size=(rows, width)).astype(np.float32)
    write_demo(
        path,
        Demonstration(
            behavior_name="expert",
            observation_shapes=((width,),),
            continuous_size=0,
            discrete_branches=(2,),
            observations=(obs,),
            continuous_actions=np.zeros((rows, 0), np.float32),
            discrete_actions=np.ones((rows, 1), np.int64),
            rewards=np.ones(rows, np.float32),
            dones=np.arange(rows) % 10 == 9,
            max_step_reached=np.zeros(rows, bool),
        ),
    )


@pytest.mark.slow
@pytest.mark.substitution(substitutions.PPO_LEARNER)
def test_ppo_with_gail_from_a_demo_file_reports_its_discriminator(tmp_path: Path) -> None:
    """GAIL with actions and VAIL from a .demo next to the YAML: its reward, loss, KL and estimates
    are progress.csv columns; a demo of other observations is one line before anything starts."""
    _write_demo(tmp_path / "expert.demo", 4)
    _write_demo(tmp_path / "other.demo", 3)
    gail = {"strength": 0.1, "demo_path": "expert.demo", "use_actions": True, "use_vail": True}
    config = {"num_env_runners": 0, "train_batch_size": 128, "minibatch_size": 64, "num_epochs": 1}
    experiment = {"gail": {"run": "PPO", "env": "CartPole-v1", "config": {**config, "reward_signals": {
        "extrinsic": {}, "gail": gail}}}}  # fmt: skip
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    out = run_train(["-f", str(path), "--stop-iters", "1", "--local-dir", str(tmp_path / "results")])
    assert out.returncode == 0, out.stderr[-3000:]
    (row,) = progress_rows(trial_dirs(tmp_path / "results")[0])
    for term in ("reward_mean", "loss", "kl_loss", "gradient_penalty", "expert_estimate", "policy_estimate"):
        assert math.isfinite(float(row[f"learners/default_policy/reward_signals/gail/{term}"])), term
    path.write_text(path.read_text().replace("expert.demo", "other.demo"))
    out = run_train(["-f", str(path), "--stop-iters", "1", "--local-dir", str(tmp_path / "results")])
    assert out.returncode == 2
    assert "observation 0 has shape (3,), the behavior's is (4,)" in out.stderr
    assert f"{path}:" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.slow
@pytest.mark.substitution(substitutions.PPO_LEARNER)
def test_each_policy_has_its_own_signals_and_self_play_copies_the_heads(tmp_path: Path) -> None:
    """A policy's own signals (algorithm_config_overrides_per_module) beside the run's, and a
    self-play policy whose frozen opponent has the same value heads."""
    for name in ("multi_agent_env.py", "cycles_env.py"):
        shutil.copy(ROOT / "configs" / name, tmp_path / name)
    small = {"num_env_runners": 0, "train_batch_size": 200, "minibatch_size": 50, "num_epochs": 1}
    experiments = {
        "runners": {"run": "PPO", "env": "multi_agent_env.TwoRunners", "config": {
            **small, "env_config": {"length": 5}, "policies": ["policy_0", "policy_1"],
            "policy_mapping_fn": "multi_agent_env.policy_mapping",
            "reward_signals": {"extrinsic": {}, "rnd": {"strength": 0.1}},
            "algorithm_config_overrides_per_module": {
                "policy_1": {"gamma": 0.9, "reward_signals": {"curiosity": {"strength": 0.1}}}},
        }},
        "cycles": {"run": "PPO", "env": "cycles_env.LightCycles", "config": {
            **small, "env_config": {"size": 8, "view": 2}, "self_play": {"save_steps": 100},
            "reward_signals": {"extrinsic": {}, "curiosity": {"strength": 0.1}},
        }},
    }  # fmt: skip
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiments, sort_keys=False))
    out = run_train(["-f", str(path), "--stop-iters", "1", "--local-dir", str(tmp_path / "results")])
    assert out.returncode == 0, out.stderr[-3000:]
    assert (
        "model policy_1: Box(1,) -> MLP [256, 256] tanh; actions Discrete(2); a value per reward signal:"
        " curiosity\n" in out.stdout
    )
    assert "model cycle@opponent: " in out.stdout and out.stdout.count("extrinsic, curiosity") == 2
    trials = {trial.parent.name: trial for trial in trial_dirs(tmp_path / "results")}
    runners, cycles = trials["runners"], trials["cycles"]
    (row,) = progress_rows(runners)
    assert {k.split("/")[1] for k in row if "/reward_signals/" in k} == {"policy_0", "policy_1"}
    assert "learners/policy_1/reward_signals/extrinsic/reward_mean" not in row  # no extrinsic: none
    assert math.isfinite(float(row["learners/policy_1/reward_signals/curiosity/forward_loss"]))
    (row,) = progress_rows(cycles)
    assert math.isfinite(float(row["learners/cycle/reward_signals/curiosity/reward_mean"]))


@pytest.mark.parametrize("stateful", [False, True])
@pytest.mark.parametrize("heads", [1, 3])
def test_the_value_loss_is_each_heads_squared_error_over_the_rows_that_count(
    heads: int, stateful: bool
) -> None:
    """One head (RLlib's compute_values drops its axis) as several: each head's loss is the mean
    squared error over the rows the mask keeps, clipped per row; padding rows count for nothing."""
    import torch

    from envsdk.training.substitutes.ppo.learner import heads_losses

    shape = (2, 5) if stateful else (10,)
    rng = np.random.default_rng(heads)
    targets = torch.as_tensor(rng.normal(size=(*shape, heads)), dtype=torch.float32)
    mask = torch.as_tensor(rng.random(shape) > 0.3)
    exact = targets.squeeze(-1) if heads == 1 else targets.clone()
    _, per_head, unclipped = heads_losses(exact, targets, mask, clip=10.0)
    assert per_head.shape == (heads,) and float(per_head.abs().max()) == 0.0 and float(unclipped) == 0.0
    off = exact + 2.0
    off[~mask] += 100.0  # rows the mask drops: no weight whatever their error
    _, per_head, unclipped = heads_losses(off, targets, mask, clip=10.0)
    assert torch.allclose(per_head, torch.full((heads,), 4.0)) and float(unclipped) == pytest.approx(4.0)
    _, clipped, _ = heads_losses(off, targets, mask, clip=1.0)
    assert torch.allclose(clipped, torch.ones(heads))
