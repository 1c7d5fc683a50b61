"""``random_steps: N`` (SB3's ``learning_starts`` warm-up, Ray 1.x's ``random_timesteps``): DQN and SAC
act uniformly at random for their first N steps (training/substitutes/replay/training_step.py), drawn
by the batched sampler in the policy's action space (training/substitutes/sampling/batched_runner.py);
where it cannot be taken, one line before anything starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from envsdk import internals, substitutions
from envsdk.errors import UserError
from envsdk.training.substitutes.replay.training_step import RANDOM_STEPS
from envsdk.training.substitutes.sampling.batched_runner import BatchedEnvRunner
from tests.helpers import ROOT, built_algorithm

pytestmark = pytest.mark.substitution(substitutions.TRANSITION_REPLAY, substitutions.BATCHED_SAMPLER)


def _build(tmp_path: Path, run: str, env: str, **config: Any) -> Any:
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    path = tmp_path / "exp.yaml"
    settings = {"run": run, "env": env, "config": {"num_env_runners": 0, **config}}
    path.write_text(yaml.safe_dump({"exp": settings}))
    (exp,) = load_experiments(path)
    return build_config(exp)


@pytest.mark.parametrize(
    ("run", "env", "config", "said"),
    [
        ("PPO", "CartPole-v1", {"random_steps": 100}, "random_steps is a warm-up of DQN's and SAC's"),
        ("SAC", "Pendulum-v1", {"random_steps": -1}, "random_steps must be a whole number of steps"),
        ("SAC", "Pendulum-v1", {"random_steps": True}, "random_steps must be a whole number of steps"),
        ("DQN", "CartPole-v1", {"random_steps": "many"}, "random_steps must be a whole number of steps"),
        (
            "SAC", "Pendulum-v1", {"random_steps": 100, "stock": ["transition-replay"]},
            "random_steps is taken by envsdk's transition-replay",
        ),
        (
            "DQN", "CartPole-v1", {"random_steps": 100, "stock": ["batched-sampler"]},
            "random_steps is taken by envsdk's batched-sampler",
        ),
        (
            "SAC", "Pendulum-v1", {"random_steps": 100, "observation_filter": "MeanStdFilter"},
            "random_steps: the warm-up's random actions are drawn by envsdk's batched sampler",
        ),
    ],
)  # fmt: skip
def test_where_random_steps_cannot_be_taken_one_line_says_so(
    tmp_path: Path, run: str, env: str, config: dict, said: str
) -> None:
    with pytest.raises(UserError, match=said) as raised:
        _build(tmp_path, run, env, **config)
    assert raised.value.hint  # and the fix


def test_a_multi_agent_config_is_refused_too(tmp_path: Path) -> None:
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    (exp,) = load_experiments(ROOT / "configs" / "multi-agent-pendulum-sac.yaml")
    exp.config["random_steps"] = 100
    with pytest.raises(UserError, match="drawn by envsdk's batched sampler"):
        build_config(exp)


@pytest.mark.slow  # builds an env runner
def test_random_actions_are_the_envs_uniform_draw_stored_in_the_policys_space(tmp_path: Path) -> None:
    """Pendulum's torque is in [-2, 2]: the env gets RLlib's draw over it; the batch stores it
    normalized into [-1, 1], where SAC's squashed policy keeps its own actions."""
    built = _build(tmp_path, "SAC", "Pendulum-v1", random_steps=100, num_envs_per_env_runner=2)
    assert built.config.learner_config_dict[RANDOM_STEPS] == 100 and built.config.normalize_actions
    runner = BatchedEnvRunner(config=built.config.copy(copy_frozen=False))
    sent: list[np.ndarray] = []
    step = runner.env.step

    def recorded(actions: Any) -> Any:
        sent.append(np.array(actions))
        return step(actions)

    runner.env.step = recorded
    try:
        episodes = runner.sample(num_timesteps=2000, random_actions=True)
    finally:
        runner.stop()
    stored = np.concatenate([np.asarray(e.get_actions()).reshape(-1) for e in episodes])
    given = np.concatenate(sent).reshape(-1)
    assert stored.size >= 2000 and given.size >= 2000
    assert -1.0 <= stored.min() < -0.95 and 0.95 < stored.max() <= 1.0
    assert abs(stored.std() - 1 / np.sqrt(3)) < 0.05  # uniform over [-1, 1]
    assert given.min() < -1.9 and given.max() > 1.9  # over the env's [-2, 2]
    # each stored action is half of one the env got (the env also got the ignored ones of reset steps)
    ordered = np.sort(given)
    at = np.clip(np.searchsorted(ordered, stored * 2), 1, len(ordered) - 1)
    nearest = np.minimum(np.abs(ordered[at] - stored * 2), np.abs(ordered[at - 1] - stored * 2))
    assert nearest.max() < 1e-5


@pytest.mark.slow  # builds an Algorithm
def test_the_training_step_samples_at_random_until_random_steps_then_with_the_policy(tmp_path: Path) -> None:
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", "box", "box", False, random_steps=64)
        try:
            runner = algo.env_runner_group.local_env_runner
            asked: list[tuple[bool, int]] = []  # each sample call: at random, env steps
            sample = runner.sample

            def recorded(**kwargs: Any) -> Any:
                episodes = sample(**kwargs)
                asked.append((bool(kwargs.get("random_actions")), sum(len(e) for e in episodes)))
                return episodes

            runner.sample = recorded
            results = [algo.train() for _ in range(4)]  # 32 env steps an iteration
        finally:
            algo.stop()
    flags = [at_random for at_random, _ in asked]
    first_policy = flags.index(False)
    assert all(flags[:first_policy]) and not any(flags[first_policy:]), flags
    at_random = sum(steps for flag, steps in asked if flag)
    assert 64 <= at_random < 64 + max(steps for _, steps in asked), asked
    learned = results[-1]["learners"]["default_policy"]
    assert np.isfinite(learned["qf_loss"]), learned  # learning started (at 16) and went on
