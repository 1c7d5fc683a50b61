"""The reward-signal models (envsdk/networks/reward_signals.py): each signal's reward and loss do
what ML-Agents' do, on every kind of space."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import tree
from ray.rllib.core.columns import Columns

from envsdk.config.own_keys.reward_signals import RewardSignals, Signal
from envsdk.networks.reward_signals import (
    Curiosity,
    Discriminator,
    Encoder,
    RandomNetworkDistillation,
    RewardSignalsModule,
    demo_shapes,
    demonstration_batch,
    episode_ends,
    flat,
    signals_module_id,
)

BOX = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
SPACES = {
    "box": BOX,
    "image": gym.spaces.Box(0, 255, (8, 8, 3), np.uint8),
    "discrete": gym.spaces.Discrete(3, start=1),
    "multidiscrete": gym.spaces.MultiDiscrete([3, 4]),
    "dict": gym.spaces.Dict({"a": BOX, "b": gym.spaces.Discrete(2)}),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,), np.float32))),
}
ACTIONS = {
    "discrete": gym.spaces.Discrete(3),
    "box": gym.spaces.Box(-1.0, 1.0, (2,), np.float32),
    "hybrid": gym.spaces.Tuple(
        (gym.spaces.Box(-1.0, 1.0, (1,), np.float32), gym.spaces.MultiDiscrete([3, 2]))
    ),
}


def _batch(space: gym.Space, values: list[Any]) -> Any:
    """Sampled values as the learner's batch holds them: tensors, nested as the space."""
    if isinstance(space, gym.spaces.Dict):
        return {k: _batch(space[k], [v[k] for v in values]) for k in space.spaces}
    if isinstance(space, gym.spaces.Tuple):
        return tuple(_batch(s, [v[i] for v in values]) for i, s in enumerate(space.spaces))
    return torch.as_tensor(np.stack(values))


def _transitions(obs: gym.Space, act: gym.Space, rows: int, seed: int = 0) -> dict[str, Any]:
    obs.seed(seed)
    act.seed(seed)
    return {
        Columns.OBS: _batch(obs, [obs.sample() for _ in range(rows)]),
        Columns.NEXT_OBS: _batch(obs, [obs.sample() for _ in range(rows)]),
        Columns.ACTIONS: _batch(act, [act.sample() for _ in range(rows)]),
    }


def _signal(name: str, strength: float = 1.0, **settings: Any) -> Signal:
    return Signal(name=name, gamma=0.99, strength=strength, learning_rate=1e-3, hidden_units=32, **settings)


def _train(model: torch.nn.Module, batch: dict[str, Any], steps: int, lr: float = 1e-3) -> list[float]:
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    losses = []
    for _ in range(steps):
        loss, _ = model.loss(batch, None)  # type: ignore[operator]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize("space", sorted(SPACES))
def test_flat_features_have_the_spaces_width_and_read_bytes_as_fractions(space: str) -> None:
    obs = SPACES[space]
    batch = _transitions(obs, ACTIONS["discrete"], 5)[Columns.OBS]
    features = flat(obs, batch)
    width = {"box": 4, "image": 192, "discrete": 3, "multidiscrete": 7, "dict": 6, "tuple": 5}[space]
    assert features.shape == (5, width)
    assert float(features.min()) >= -1 and float(features.max()) <= 1  # one-hots, bytes / 255


@pytest.mark.parametrize("act", sorted(ACTIONS))
@pytest.mark.parametrize("space", ["box", "dict", "image"])
def test_curiosity_rewards_the_surprising_and_stops_once_it_learned_it(space: str, act: str) -> None:
    torch.manual_seed(0)
    obs = SPACES[space]
    model = Curiosity(obs, ACTIONS[act], _signal("curiosity", strength=0.01))
    seen, fresh = _transitions(obs, ACTIONS[act], 64), _transitions(obs, ACTIONS[act], 64, seed=1)
    assert float(model.reward(seen).sum()) == 0  # ML-Agents: nothing before the first update
    losses = _train(model, seen, 200)
    assert losses[-1] < 0.75 * losses[0]
    familiar, surprising = float(model.reward(seen).mean()), float(model.reward(fresh).mean())
    assert surprising > 1.5 * familiar  # transitions it never saw surprise it more
    _train(model, fresh, 200)
    assert float(model.reward(fresh).mean()) < 0.5 * surprising  # and less once it learned them


def test_curiosity_reward_is_capped_at_one_over_its_strength_and_half_the_squared_error() -> None:
    torch.manual_seed(0)
    model = Curiosity(BOX, ACTIONS["box"], _signal("curiosity", strength=50.0))
    batch = _transitions(BOX, ACTIONS["box"], 16)
    _train(model, batch, 1)
    with torch.no_grad():
        here, there = model.encoder(batch[Columns.OBS]), model.encoder(batch[Columns.NEXT_OBS])
        predicted = model.forward_model(torch.cat([here, flat(ACTIONS["box"], batch[Columns.ACTIONS])], 1))
        expected = torch.clamp(0.5 * ((there - predicted) ** 2).sum(1), max=1 / 50.0)
    assert torch.allclose(model.reward(batch), expected)


def test_curiosity_loss_weighs_forward_and_inverse_as_ml_agents() -> None:
    torch.manual_seed(0)
    model = Curiosity(BOX, ACTIONS["discrete"], _signal("curiosity"))
    loss, terms = model.loss(_transitions(BOX, ACTIONS["discrete"], 8), None)
    assert float(loss.detach()) == pytest.approx(
        10 * (0.2 * float(terms["forward_loss"]) + 0.8 * float(terms["inverse_loss"]))
    )


@pytest.mark.parametrize("normalize", [False, True])
@pytest.mark.parametrize("space", ["box", "image", "tuple"])
def test_rnd_predictor_learns_the_fixed_target_and_its_reward_falls(space: str, normalize: bool) -> None:
    torch.manual_seed(0)
    model = RandomNetworkDistillation(SPACES[space], _signal("rnd", normalize=normalize))
    batch = _transitions(SPACES[space], ACTIONS["discrete"], 64)
    target = [p.clone() for p in model.target.body.parameters()]
    before = float(model.reward(batch).mean())
    losses = _train(model, batch, 200)
    assert losses[-1] < 0.2 * losses[0]
    assert float(model.reward(batch).mean()) < 0.2 * before
    assert all(torch.equal(a, b) for a, b in zip(target, model.target.body.parameters(), strict=True))


def test_the_module_holds_one_model_per_intrinsic_signal_and_sums_their_losses() -> None:
    signals = RewardSignals((_signal("extrinsic"), _signal("curiosity"), _signal("rnd")))
    module = RewardSignalsModule(
        observation_space=BOX,
        action_space=ACTIONS["discrete"],
        model_config={"reward_signals": signals.to_config()},
    )
    batch = _transitions(BOX, ACTIONS["discrete"], 8)
    assert sorted(module.models) == ["curiosity", "rnd"]
    assert sorted(module.rewards(batch)) == ["curiosity", "rnd"]
    total, terms = module.losses(batch)
    total = total.detach()
    assert sorted(terms) == ["curiosity", "rnd"]
    curiosity = 10 * (0.2 * terms["curiosity"]["forward_loss"] + 0.8 * terms["curiosity"]["inverse_loss"])
    assert float(total) == pytest.approx(float(curiosity + terms["rnd"]["loss"]), rel=1e-5)
    assert signals_module_id("blue") == "blue@reward_signals"


def _demo(obs: np.ndarray, continuous: np.ndarray, discrete: np.ndarray, branches: tuple[int, ...]) -> Any:
    from unity_bridge.demo_files import Demonstration

    rows = len(obs)
    return Demonstration(
        behavior_name="expert",
        observation_shapes=(obs.shape[1:],),
        continuous_size=continuous.shape[1],
        discrete_branches=branches,
        observations=(obs.astype(np.float32),),
        continuous_actions=continuous.astype(np.float32),
        discrete_actions=discrete.astype(np.int64),
        rewards=np.zeros(rows, np.float32),
        dones=(np.arange(rows) % 10 == 9),
        max_step_reached=np.zeros(rows, bool),
    )


def test_a_demonstration_becomes_a_batch_of_the_policys_spaces() -> None:
    act = ACTIONS["hybrid"]  # Tuple(Box(1), MultiDiscrete([3, 2]))
    rng = np.random.default_rng(0)
    demo = _demo(rng.normal(size=(6, 4)), rng.normal(size=(6, 1)), rng.integers(0, 2, size=(6, 2)), (3, 2))
    batch = demonstration_batch(demo, BOX, act)
    assert batch[Columns.OBS].shape == (6, 4)
    assert batch[Columns.ACTIONS][0].shape == (6, 1) and batch[Columns.ACTIONS][1].shape == (6, 2)
    assert demo_shapes(BOX, act) == ([(4,)], 1, [3, 2])
    assert flat(act, batch[Columns.ACTIONS]).shape == (6, 1 + 3 + 2)


@pytest.mark.parametrize(
    ("use_actions", "use_vail"), [(False, False), (True, False), (False, True), (True, True)]
)
def test_gail_tells_the_expert_from_the_policy_and_rewards_expert_like_steps(
    use_actions: bool, use_vail: bool
) -> None:
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    act = ACTIONS["discrete"]
    expert_obs = rng.normal(0.5, 0.3, size=(256, 4))
    demo = _demo(expert_obs, np.zeros((256, 0)), np.full((256, 1), 2), (3,))
    signal = _signal("gail", use_actions=use_actions, use_vail=use_vail)
    model = Discriminator(BOX, act, signal, demonstration_batch(demo, BOX, act))
    policy = {
        Columns.OBS: torch.as_tensor(rng.normal(-0.5, 0.3, size=(64, 4)), dtype=torch.float32),
        Columns.ACTIONS: torch.zeros(64, dtype=torch.int64),
        Columns.TERMINATEDS: torch.zeros(64),
    }
    expert = {k: v[:64] for k, v in model.expert.items()}
    _, terms = model.loss(policy, None)
    assert ("kl_loss" in terms) == use_vail and ("beta" in terms) == use_vail
    assert float(terms["gradient_penalty"]) >= 0
    _train(model, policy, 150)
    _, terms = model.loss(policy, None)
    assert float(terms["expert_estimate"]) > float(terms["policy_estimate"]) + 0.3  # (VAIL's noise included)
    assert float(model.reward(expert).mean()) > float(model.reward(policy).mean()) + 0.5  # -log(1 - D)
    if use_vail:
        assert float(terms["beta"]) > 0  # the bottleneck's weight moved toward its information bound


def test_gail_done_is_each_episodes_real_end_not_where_the_sampler_cut_it(tmp_path: Path) -> None:
    """With GAIL's use_actions the learner's connector (PPO's here; APPO's and IMPALA's the same)
    takes MarkEpisodeEnds in place of RLlib's AddOneTsToEpisodesAndTruncate: the last real step of
    an episode the env terminated or truncated is flagged (ML-Agents' done, max_step included); a
    chunk the sampler cut mid-episode, which RLlib marks truncated too, is not; bootstrap rows never."""
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from envsdk.networks.reward_signals import SIGNALS
    from envsdk.training.substitutes.reward_signals import MarkEpisodeEnds, mark_episode_ends, rows_of
    from tests.training.substitutes.test_ppo_signals import _write_demo

    _write_demo(tmp_path / "expert.demo", 4)
    gail = _signal("gail", use_actions=True, demo_path=str(tmp_path / "expert.demo"))
    act = gym.spaces.Discrete(2)
    config = {SIGNALS: RewardSignals((gail,)).to_config()}
    module = RewardSignalsModule(observation_space=BOX, action_space=act, model_config=config)
    pipeline = PPOConfig().build_learner_connector(BOX, act)
    pipeline.prepend(AddOneTsToEpisodesAndTruncate())  # as RLlib's PPO (APPO, IMPALA) learner's build does
    mark_episode_ends(pipeline, {signals_module_id("p"): module})
    pieces = [type(c) for c in pipeline.connectors]
    assert MarkEpisodeEnds in pieces and AddOneTsToEpisodesAndTruncate not in pieces
    assert pieces.index(MarkEpisodeEnds) == 0  # where RLlib's piece was: before the columns are added

    def episode(steps: int, terminated: bool, truncated: bool) -> SingleAgentEpisode:
        return SingleAgentEpisode(
            observations=[np.zeros(4, np.float32)] * (steps + 1),
            actions=[0] * steps,
            rewards=[1.0] * steps,
            terminated=terminated,
            truncated=truncated,
            len_lookback_buffer=0,
        ).to_numpy()

    episodes = [episode(3, True, False), episode(2, False, True), episode(2, False, False)]
    columns: dict[str, Any] = {}
    pipeline.connectors[0](rl_module=None, batch=columns, episodes=episodes, shared_data={})
    batch = {k: torch.as_tensor(np.concatenate(list(v.values()))) for k, v in columns.items()}
    assert batch[Columns.LOSS_MASK].tolist() == [1, 1, 1, 0, 1, 1, 0, 1, 1, 0]  # bootstrap rows: 0
    assert batch[Columns.TRUNCATEDS].tolist() == [0, 0, 0, 0, 0, 1, 0, 0, 1, 0]  # RLlib's: the cut too
    # rows of: terminated (3 + 1) | truncated by the env (2 + 1) | a chunk still going on
    assert episode_ends(rows_of(batch, 1)).tolist() == [0, 0, 1, 0, 0, 1, 0, 0, 0, 0]


def test_the_experts_last_unfinished_episode_ends_at_the_files_end() -> None:
    """A recording cut short: its last row is the end of an episode (truncated), as the file's
    Demonstration.episode_ends says."""
    demo = _demo(np.zeros((12, 4)), np.zeros((12, 0)), np.ones((12, 1)), (3,))
    batch = demonstration_batch(demo, BOX, ACTIONS["discrete"])
    assert np.flatnonzero(episode_ends(batch).numpy()).tolist() == [9, 11]
    assert batch[Columns.TRUNCATEDS].tolist() == [0.0] * 11 + [1.0]


@pytest.mark.parametrize(
    ("space", "normalized"),
    [
        ("box", [True] * 4),
        ("image", [False] * 192),
        ("discrete", [False] * 3),
        ("dict", [True] * 4 + [False] * 2),
        ("camera and vector", [False] * 192 + [True] * 4),
        ("matrix and flags", [True] * 6 + [False] * 3),
    ],
)
def test_normalize_reads_vector_observations_only(space: str, normalized: list[bool]) -> None:
    """ML-Agents normalises vector observations (VectorInput), not visual ones: a Box of floats is
    normalised, an image (uint8, or any Box of rank 3), a one-hot or MultiBinary part is not."""
    obs = {
        **SPACES,
        "camera and vector": gym.spaces.Dict(
            {"camera": gym.spaces.Box(0.0, 1.0, (8, 8, 3), np.float32), "vector": BOX}
        ),
        "matrix and flags": gym.spaces.Tuple(
            (gym.spaces.Box(-1.0, 1.0, (2, 3), np.float32), gym.spaces.MultiBinary(3))
        ),
    }[space]
    encoder = Encoder(obs, _signal("rnd", normalize=True))
    assert encoder.normalizer is not None
    features = flat(obs, _transitions(obs, ACTIONS["discrete"], 32)[Columns.OBS]) * 3 + 7
    encoder.normalizer.update(features)
    changed = (encoder.normalizer(features) != features).any(dim=0)
    assert changed.tolist() == normalized


def test_gail_reads_a_masked_game_of_camera_and_vector_from_its_demo() -> None:
    """A Dict of Dicts with an action mask: the expert's rows drawn whole, the mask no input."""
    from envsdk.evaluation.demonstrations.recording import demonstration, layout
    from envsdk.evaluation.evaluator import EpisodeRecord, Trace

    obs = gym.spaces.Dict(
        {
            "observations": gym.spaces.Dict({"camera": SPACES["image"], "vector": BOX}),
            "action_mask": gym.spaces.Box(0, 1, (5,), np.int8),
        }
    )
    act = ACTIONS["hybrid"]
    values = _transitions(obs, act, 9)
    trace = Trace(
        tree.map_structure(lambda x: x.numpy(), values[Columns.OBS]),
        tree.map_structure(lambda x: x.numpy()[:8], values[Columns.ACTIONS]),
        np.ones(8),
        [{}] * 9,
        False,
        True,
    )
    demo = demonstration([EpisodeRecord({"a/0": trace}, 8, True)], layout({"a/0": (obs, act)}, "env", False))
    model = Discriminator(obs, act, _signal("gail", use_actions=True), demonstration_batch(demo, obs, act))
    expert = model.expert_batch(4, torch.device("cpu"))
    assert expert[Columns.OBS]["observations"]["camera"].shape == (4, 8, 8, 3)
    policy = {k: tree.map_structure(lambda x: x[:8], v) for k, v in values.items()}
    policy[Columns.TERMINATEDS] = torch.zeros(8)
    loss, _ = model.loss(policy, None)
    assert torch.isfinite(loss)


def test_codes_reach_the_signal_models_between_0_and_1():
    """A text part's character indices and an image's bytes are codes, not magnitudes: the signal
    models read them scaled into 0 to 1 (MiniGrid's mission, raw, made RND's reward 70 where the
    image's was 0.02); a float Box as it is."""
    from envsdk.envs.spaces import TextTokens
    from envsdk.networks.reward_signals import flat

    text = TextTokens("abcdefghij", 6)
    space = gym.spaces.Dict(
        {
            "mission": text,
            "image": gym.spaces.Box(0, 255, (2, 2, 1), np.uint8),
            "speed": gym.spaces.Box(-10.0, 10.0, (1,)),
        }
    )
    value = {
        "mission": torch.as_tensor(np.stack([text.encode("jab"), text.encode("zzzzzz")])),
        "image": torch.full((2, 2, 2, 1), 255, dtype=torch.uint8),
        "speed": torch.tensor([[-7.5], [3.0]]),
    }
    rows = flat(space, value)
    assert rows.shape == (2, 6 + 4 + 1)
    columns = {k: rows[:, a:b] for k, a, b in (("image", 0, 4), ("mission", 4, 10), ("speed", 10, 11))}
    assert torch.equal(columns["image"], torch.ones(2, 4))
    assert torch.allclose(columns["mission"][0], torch.tensor([10, 1, 2, 0, 0, 0]) / 11)
    assert torch.equal(columns["mission"][1], torch.ones(6))  # 11: outside the charset, the top code
    assert columns["speed"].flatten().tolist() == [-7.5, 3.0]
