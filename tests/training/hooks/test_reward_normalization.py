"""``normalize_rewards: true``: what the loss sees is scaled, what the user sees is not."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.core.columns import Columns
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from envsdk.training.hooks.reward_normalization import RewardNormalizer
from tests.helpers import ROOT

GAMMA = 0.9


def episode(
    rewards: list[float], *, id_: str = "e", t_started: int = 0, done: bool = False
) -> SingleAgentEpisode:
    n = len(rewards)
    return SingleAgentEpisode(
        id_=id_,
        observations=[np.zeros(2, np.float32)] * (n + 1),
        actions=[0] * n,
        rewards=rewards,
        observation_space=gym.spaces.Box(-1, 1, (2,), np.float32),
        action_space=gym.spaces.Discrete(2),
        t_started=t_started,
        terminated=done,
        len_lookback_buffer=0,
    )


def scaled(piece: RewardNormalizer, episodes: list[SingleAgentEpisode]) -> list[np.ndarray]:
    """Each episode's rewards as the piece puts them into a learner batch."""
    batch: dict = {}
    piece(rl_module=None, batch=batch, episodes=episodes)
    return [np.concatenate(items) for items in batch[Columns.REWARDS].values()]  # bulk-added arrays


def running_returns(rewards: list[float]) -> np.ndarray:
    out, running = [], 0.0
    for r in rewards:
        running = running * GAMMA + r
        out.append(running)
    return np.array(out)


@pytest.mark.parametrize("cut", [1, 4, 9])
def test_rewards_are_divided_by_the_std_of_the_running_return_across_chunks(cut):
    """An episode cut into two batches gives the statistics it gives in one; rewards keep their sign."""
    rng = np.random.default_rng(cut)
    rewards = list(rng.normal(-3.0, 2.0, size=10))
    piece = RewardNormalizer(gamma=GAMMA, clip=math.inf)
    scaled(piece, [episode(rewards[:cut])])
    (second,) = scaled(piece, [episode(rewards[cut:], t_started=cut)])
    expected_var = running_returns(rewards).var()
    assert piece.variance(None) == pytest.approx(expected_var)
    np.testing.assert_allclose(second, np.array(rewards[cut:]) / np.sqrt(expected_var + 1e-8), rtol=1e-5)


def test_a_new_episode_starts_its_return_at_zero_and_large_rewards_are_clipped():
    piece = RewardNormalizer(gamma=GAMMA, clip=2.0)
    scaled(piece, [episode([1.0] * 5, id_="a", done=True)])
    (out,) = scaled(piece, [episode([0.0, 0.0, 1000.0], id_="b")])
    expected = np.concatenate([running_returns([1.0] * 5), running_returns([0.0, 0.0, 1000.0])])
    assert piece.variance(None) == pytest.approx(expected.var())
    assert out.tolist() == [0.0, 0.0, 2.0]


def test_state_round_trip():
    piece = RewardNormalizer(gamma=GAMMA)
    scaled(piece, [episode([1.0, 2.0, 3.0])])
    other = RewardNormalizer(gamma=GAMMA)
    other.set_state(piece.get_state())
    assert other.variance(None) == piece.variance(None) != 1.0
    other.reset_state()
    assert other.variance(None) == 1.0


def _vf_loss_and_learned(config_file, overrides: dict, normalize: bool) -> tuple[dict, dict, dict]:
    """One PPO iteration in-process: per-module vf_loss, the run's episode metrics, the learned variances."""
    from envsdk import internals
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    exp = load_experiments(config_file)[0]
    built = build_config(exp, {**overrides, "normalize_rewards": normalize, "seed": 3})
    with internals.without_object_store():
        algo = built.config.build_algo()
        try:
            result = algo.train()

            def learned(learner):
                pieces = internals.learner_connector(learner).connectors
                ours = [p for p in pieces if isinstance(p, RewardNormalizer)]
                return {m: ours[0].variance(m) for m in ours[0].stats} if ours else {}

            (variances,) = [r.get() for r in algo.learner_group.foreach_learner(learned)]
        finally:
            algo.stop()
    losses = {
        m: r["vf_loss"] for m, r in result["learners"].items() if isinstance(r, dict) and "vf_loss" in r
    }
    return losses, result["env_runners"], variances


# One update from the initial weights: its value loss is the squared value target (the initial
# values are near 0), so scaling the rewards by 1/std scales the loss by 1/variance.
ONE_UPDATE = {"train_batch_size": 512, "minibatch_size": 512, "num_epochs": 1, "vf_clip_param": math.inf}


@pytest.mark.slow  # builds an Algorithm
@pytest.mark.parametrize(
    ("config_file", "modules"),
    [("cartpole-ppo.yaml", {None}), ("multi-agent.yaml", {"policy_0", "policy_1"})],
)
def test_ppo_learns_on_scaled_rewards_while_metrics_stay_raw(config_file, modules):
    """Same seed, same first batch: the value loss moves with the reward scale; returns do not."""
    path = ROOT / "configs" / config_file
    overrides = {**ONE_UPDATE, "num_env_runners": 0}
    raw_loss, raw_metrics, none_learned = _vf_loss_and_learned(path, overrides, normalize=False)
    loss, metrics, learned = _vf_loss_and_learned(path, overrides, normalize=True)
    assert none_learned == {}
    assert set(learned) == modules, learned
    assert metrics["episode_return_mean"] == pytest.approx(raw_metrics["episode_return_mean"])
    assert set(loss) == set(raw_loss)
    by_module = {(None if m == "default_policy" else m): (loss[m], raw_loss[m]) for m in loss}
    assert set(by_module) == modules
    for module, (scaled_loss, raw) in by_module.items():
        expected = 1 / learned[module]
        assert abs(expected - 1) > 0.5, expected  # a game whose returns vary as much as 1 would prove nothing
        assert expected / 1.5 < scaled_loss / raw < expected * 1.5, (module, scaled_loss, raw, learned)
