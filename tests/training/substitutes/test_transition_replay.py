"""The transition replay buffer behind DQN and SAC (envsdk/training/substitutes/replay/buffers.py).

Episodes are built and cut into chunks the way RLlib's env runners hand them
over (``SingleAgentEpisode.cut()`` at the end of every ``sample()``), with
observations that name their episode and step, so every sampled row can be
checked against the episode it came from.
"""

from __future__ import annotations

import shutil

import gymnasium as gym
import numpy as np
import pytest
import tree
import yaml
from ray.rllib.connectors.connector_v2 import ConnectorV2
from ray.rllib.env.single_agent_episode import SingleAgentEpisode
from ray.rllib.utils.replay_buffers.episode_replay_buffer import EpisodeReplayBuffer

from envsdk import internals
from envsdk.training.substitutes.replay import training_step
from envsdk.training.substitutes.replay.buffers import ModuleTransitions, SumTree, TransitionReplayBuffer
from tests.helpers import ROOT, built_algorithm

GAMMA = 0.9
OBS_SPACE = gym.spaces.Box(-1e6, 1e6, (2,), np.float32)
ACT_SPACE = gym.spaces.Discrete(5)


def reward(episode: int, t: int) -> float:
    return float(episode * 100 + t)


def chunks(episode: int, length: int, cuts: list[int], terminated: bool = True) -> list[SingleAgentEpisode]:
    """Episode ``episode`` of ``length`` steps (ended at the last one), cut after the steps in ``cuts``.

    Observation t is ``[episode, t]``; action t is ``t % 5``; reward t is :func:`reward`.
    """
    out = []
    current = SingleAgentEpisode(observation_space=OBS_SPACE, action_space=ACT_SPACE)
    current.add_env_reset(observation=np.array([episode, 0], np.float32))
    for t in range(length):
        last = t == length - 1
        current.add_env_step(
            observation=np.array([episode, t + 1], np.float32),
            action=t % 5,
            reward=reward(episode, t),
            terminated=last and terminated,
            truncated=last and not terminated,
        )
        if t + 1 in cuts and not last:
            successor = current.cut()
            out.append(current.to_numpy())
            current = successor
    out.append(current.to_numpy())
    return out


def check_rows(batch: dict, lengths: dict[int, int], terminated: bool = True) -> None:
    """Every row is a real n-step transition of the episodes whose lengths are given."""
    for i in range(len(batch["rewards"])):
        episode, t = (int(v) for v in batch["obs"][i])
        m = int(batch["n_step"][i])
        assert batch["actions"][i] == t % 5
        assert list(batch["new_obs"][i]) == [episode, t + m]
        assert t + m <= lengths[episode]
        expected = sum(GAMMA**k * reward(episode, t + k) for k in range(m))
        assert batch["rewards"][i] == pytest.approx(expected, rel=1e-5)
        ends = t + m == lengths[episode]
        assert batch["terminateds"][i] == (ends and terminated)
        assert batch["truncateds"][i] == (ends and not terminated)


def test_rows_are_the_transitions_of_the_episodes():
    buffer = TransitionReplayBuffer(1000, seed=0)
    lengths = {1: 7, 2: 3, 3: 12}
    for episode, length in lengths.items():
        buffer.add(chunks(episode, length, cuts=[2, 5]))
    assert len(buffer) == sum(lengths.values())
    batch = buffer.sample(500, gamma=GAMMA)
    check_rows(batch, lengths)
    assert set(batch["n_step"]) == {1}
    assert batch["weights"].tolist() == [1.0] * 500
    seen = {tuple(o) for o in batch["obs"]}
    assert len(seen) == len(buffer)  # 500 uniform draws from 22 rows reach them all


@pytest.mark.parametrize("n", [2, 3, 5])
@pytest.mark.parametrize("cuts", [[], [1], [2, 3, 4], [6]], ids=["whole", "cut1", "cuts234", "cut6"])
@pytest.mark.parametrize("terminated", [True, False], ids=["terminated", "truncated"])
def test_n_step_returns_run_across_chunks_and_stop_at_the_episode_end(n, cuts, terminated):
    buffer = TransitionReplayBuffer(1000, seed=1)
    lengths = {1: 7, 2: 2}
    # The chunks of two episodes arrive interleaved, as two envs' chunks do.
    first, second = chunks(1, 7, cuts, terminated), chunks(2, 2, [1], terminated)
    for i in range(max(len(first), len(second))):
        buffer.add([c for c in (first[i : i + 1] + second[i : i + 1])])
    batch = buffer.sample(400, n_step=n, gamma=GAMMA)
    check_rows(batch, lengths, terminated)
    for i in range(400):
        episode, t = (int(v) for v in batch["obs"][i])
        assert batch["n_step"][i] == min(n, lengths[episode] - t)  # every later step is stored


def test_an_open_episode_bootstraps_from_its_last_stored_step():
    buffer = TransitionReplayBuffer(100, seed=2)
    episode = chunks(1, 10, cuts=[4])[0]  # the first 4 steps; the episode goes on
    buffer.add(episode)
    batch = buffer.sample(200, n_step=3, gamma=GAMMA)
    check_rows(batch, {1: 10})
    for i in range(200):
        t = int(batch["obs"][i][1])
        assert batch["n_step"][i] == min(3, 4 - t)
        assert not batch["terminateds"][i]


def test_a_random_n_step_range_is_drawn_per_row_excluding_its_upper_end():
    buffer = TransitionReplayBuffer(100, seed=3)
    buffer.add(chunks(1, 50, cuts=[]))
    batch = buffer.sample(2000, n_step=(1, 4), gamma=GAMMA)
    check_rows(batch, {1: 50})
    assert set(batch["n_step"]) == {1, 2, 3}


def test_overwritten_rows_are_never_followed():
    buffer = TransitionReplayBuffer(10, seed=4)
    one_first, one_rest = chunks(1, 6, cuts=[3])
    three_first, three_rest = chunks(3, 4, cuts=[2])
    buffer.add(one_first)  # rows 0-2, episode 1 open
    buffer.add(chunks(2, 8, cuts=[]))  # rows 3-9, 0
    buffer.add(three_first)  # rows 1-2: episode 1's last row now holds episode 3, also open
    buffer.add(one_rest)  # rows 3-5: its predecessor is gone, so it links to nothing
    buffer.add(three_rest)  # rows 6-7, linked to episode 3's rows 1-2; episode 2 keeps rows 8, 9, 0
    assert len(buffer) == 10
    batch = buffer.sample(3000, n_step=4, gamma=GAMMA)
    check_rows(batch, {1: 6, 2: 8, 3: 4})
    by_start = {tuple(int(v) for v in o): int(m) for o, m in zip(batch["obs"], batch["n_step"], strict=True)}
    assert set(by_start) == {(2, 5), (2, 6), (2, 7), (3, 0), (3, 1), (1, 3), (1, 4), (1, 5), (3, 2), (3, 3)}
    assert by_start[(3, 0)] == 4 and by_start[(1, 3)] == 3 and by_start[(2, 5)] == 3


def test_a_chunk_longer_than_the_buffer_keeps_its_newest_steps():
    buffer = TransitionReplayBuffer(5, seed=5)
    buffer.add(chunks(1, 12, cuts=[]))
    batch = buffer.sample(200, gamma=GAMMA)
    assert {int(o[1]) for o in batch["obs"]} == {7, 8, 9, 10, 11}
    check_rows(batch, {1: 12})


def test_nested_observations_and_actions_keep_their_structure():
    obs_space = gym.spaces.Dict({"pos": gym.spaces.Box(-1, 1, (3,)), "mask": gym.spaces.MultiBinary(4)})
    act_space = gym.spaces.Tuple((gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))))
    episode = SingleAgentEpisode(observation_space=obs_space, action_space=act_space)
    episode.add_env_reset(observation=obs_space.sample())
    for t in range(5):
        episode.add_env_step(
            observation=obs_space.sample(), action=act_space.sample(), reward=1.0, terminated=t == 4
        )
    buffer = TransitionReplayBuffer(100, seed=6)
    buffer.add(episode.to_numpy())
    batch = buffer.sample(8, gamma=GAMMA)
    assert batch["obs"]["pos"].shape == (8, 3) and batch["new_obs"]["mask"].shape == (8, 4)
    assert batch["actions"][0].shape == (8,) and batch["actions"][1].shape == (8, 2)


def test_sum_tree_finds_the_slot_of_each_cumulative_mass():
    rng = np.random.default_rng(0)
    tree = SumTree(37)
    values = rng.random(37)
    values[[3, 20]] = 0.0
    tree.set(np.arange(37), values)
    assert tree.total == pytest.approx(values.sum())
    masses = rng.random(5000) * tree.total
    expected = np.searchsorted(np.cumsum(values), masses, side="right")
    assert (tree.find(masses) == expected).all()
    tree.set(np.array([5, 5, 30]), np.array([2.0, 2.0, 0.5]))
    values[[5, 30]] = [2.0, 0.5]
    assert tree.total == pytest.approx(values.sum())


def test_prioritized_sampling_follows_the_priorities_and_weighs_by_them():
    alpha, beta = 0.6, 0.4
    buffer = TransitionReplayBuffer(100, alpha=alpha, seed=7)
    buffer.add(chunks(1, 4, cuts=[]))
    first = buffer.sample(4, gamma=GAMMA)
    assert first["weights"].tolist() == [1.0] * 4  # new rows share the highest priority
    # Give the rows TD errors 1, 2, 3, 4 by their step.
    td = np.array([1.0, 2.0, 3.0, 4.0])
    buffer.sample(4, gamma=GAMMA)
    steps = [int(o[1]) for o in buffer.sample(4, gamma=GAMMA)["obs"]]
    buffer.update_priorities(td[steps])
    everything = buffer.sample(40_000, gamma=GAMMA, beta=beta)
    drawn = np.bincount(everything["obs"][:, 1].astype(int), minlength=4) / 40_000
    sampled_steps = set(steps)
    priority = np.array([(td[s] + 1e-6) ** alpha if s in sampled_steps else 4.0**0 for s in range(4)])
    # Rows not in the updated sample kept the initial (highest seen, 1.0 before) priority.
    probabilities = priority / priority.sum()
    assert drawn == pytest.approx(probabilities, abs=0.01)
    weights = (probabilities * 4) ** -beta / (probabilities.min() * 4) ** -beta
    for step in range(4):
        rows = everything["obs"][:, 1] == step
        assert everything["weights"][rows] == pytest.approx(weights[step], rel=1e-4)


def test_state_round_trip_keeps_rows_links_and_priorities():
    buffer = TransitionReplayBuffer(50, alpha=0.5, seed=8)
    first, rest = chunks(1, 8, cuts=[4])
    buffer.add(first)
    buffer.update_priorities(np.ones(0))  # nothing sampled yet: nothing changes
    restored = TransitionReplayBuffer(50, alpha=0.5, seed=8)
    restored.set_state(buffer.get_state())
    restored.add(rest)  # the open episode goes on after the restore
    batch = restored.sample(500, n_step=6, gamma=GAMMA)
    check_rows(batch, {1: 8})
    assert batch["n_step"].max() == 6
    assert restored.get_metrics()["num_env_steps_added_lifetime"] == 8


def test_an_empty_buffer_says_so():
    with pytest.raises(ValueError, match="empty"):
        TransitionReplayBuffer(10).sample(4)


# ---- against RLlib's own path: the learner gets the same columns ------------------------------

SAME_COLUMNS = [
    ("SAC", "box", "box", False),
    ("SAC", "dict", "box", False),
    ("SAC", "tuple", "discrete", False),
    ("DQN", "discrete", "discrete", False),
    ("DQN", "dict", "discrete", True),
    ("DQN", "image", "discrete", False),
]


@pytest.mark.slow
@pytest.mark.parametrize("case", SAME_COLUMNS, ids=["-".join(map(str, c)) for c in SAME_COLUMNS])
def test_the_learner_gets_the_columns_rllibs_episode_path_gives_it(tmp_path, case):
    """Names, nesting, dtypes and shapes of every column, after each path's conversion to tensors."""
    from ray.rllib.core import DEFAULT_MODULE_ID
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch

    with internals.without_object_store():
        algo = built_algorithm(tmp_path, *case)
        try:
            assert isinstance(algo.local_replay_buffer, ModuleTransitions)
            episodes = algo.env_runner.sample(num_timesteps=40)
            ours = TransitionReplayBuffer(100, seed=0)
            ours.add(episodes)
            theirs = EpisodeReplayBuffer(capacity=100)
            theirs.add(episodes)
            learner = internals.local_learner(algo.learner_group)
            sampled = theirs.sample(num_items=16, n_step=1, gamma=0.99, sample_episodes=True)
            rllib_batch = internals.learner_connector(learner)(
                rl_module=learner.module, batch={}, episodes=sampled, shared_data={}, metrics=None
            )[DEFAULT_MODULE_ID]
            our_batch = internals.learner_batch(
                learner, MultiAgentBatch({DEFAULT_MODULE_ID: SampleBatch(ours.sample(16))}, env_steps=16)
            ).policy_batches[DEFAULT_MODULE_ID]
            described = {
                k: tree.map_structure(lambda t: (t.dtype, tuple(t.shape)), rllib_batch[k])
                for k in rllib_batch
            }
            assert {
                k: tree.map_structure(lambda t: (t.dtype, tuple(t.shape)), our_batch[k]) for k in described
            } == described
            assert set(our_batch.keys()) == set(rllib_batch.keys())
        finally:
            algo.stop()


@pytest.mark.slow  # builds an Algorithm
def test_a_recurrent_model_keeps_rllibs_replay(tmp_path):
    with internals.without_object_store():
        algo = built_algorithm(
            tmp_path, "DQN", "box", "discrete", False, model={"use_lstm": True, "max_seq_len": 4},
            # RLlib 2.60's prioritized buffer fails to update priorities for a recurrent module
            replay_buffer_config={"type": "EpisodeReplayBuffer"},
        )  # fmt: skip
        try:
            assert training_step.why_not_transitions(algo) == "a recurrent module"
            assert not isinstance(algo.local_replay_buffer, ModuleTransitions)
            algo.train()
        finally:
            algo.stop()


class UsersOwnBuffer(EpisodeReplayBuffer):
    """A buffer of the user's: whatever it does, RLlib's path keeps it."""


@pytest.mark.slow
def test_a_users_own_buffer_keeps_rllibs_replay():
    from ray.rllib.algorithms.dqn import DQNConfig

    config = (
        DQNConfig()
        .environment("CartPole-v1")
        .env_runners(num_env_runners=0)
        .training(train_batch_size=16, replay_buffer_config={"type": f"{__name__}.UsersOwnBuffer"})
    )
    config.update_from_dict(
        {"num_steps_sampled_before_learning_starts": 20, "min_sample_timesteps_per_iteration": 40}
    )
    with internals.without_object_store():
        algo = training_step.DQN(config=config)
        try:
            assert training_step.why_not_transitions(algo) == "replay buffer UsersOwnBuffer"
            assert not isinstance(algo.local_replay_buffer, ModuleTransitions)
            algo.train()
        finally:
            algo.stop()


# ---- several modules ------------------------------------------------------------------------------


def turn_config(run: str, act: str, **training):
    """RLlib's config of ``run`` on tests/data/envs/turn_env.py, agent x -> policy_x, y -> policy_y."""
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.algorithms.sac import SACConfig
    from ray.tune.registry import register_env

    from tests.data.envs.turn_env import TurnEnv, policy_mapping

    register_env("turns", lambda cfg: TurnEnv(cfg))
    config = (DQNConfig() if run == "DQN" else SACConfig()).environment("turns", env_config={"act": act})
    config.env_runners(num_env_runners=0)
    config.multi_agent(policies={"policy_x", "policy_y"}, policy_mapping_fn=policy_mapping)
    config.training(train_batch_size=16, **training)
    config.rl_module(model_config={"fcnet_hiddens": [32]})
    # 40 env steps an iteration (RLlib's defaults: DQN 1,000, SAC 100): each still learns at every step
    config.update_from_dict(
        {"num_steps_sampled_before_learning_starts": 20, "min_sample_timesteps_per_iteration": 40, "seed": 0}
    )
    return config


def check_agent_rows(batch: dict, agent: str, length: int) -> None:
    """Every row is one of ``agent``'s own steps: from one of its observations to its next one,
    with every reward it got in between."""
    from tests.data.envs.turn_env import reward as turn_reward

    for i in range(len(batch["rewards"])):
        start, end = int(batch["obs"][i][0]), int(batch["new_obs"][i][0])
        assert start % 2 == (0 if agent == "x" else 1), "another agent's observation"
        assert end == min(start + 2, length)
        assert batch["rewards"][i] == pytest.approx(sum(turn_reward(agent, t) for t in range(start, end)))
        assert batch["terminateds"][i] == (end == length) == bool(batch["new_obs"][i][1])


@pytest.mark.slow
@pytest.mark.parametrize("run,act", [("DQN", "discrete"), ("SAC", "box")])
def test_each_agents_steps_go_to_its_modules_buffer(run, act):
    from tests.data.envs.turn_env import TurnEnv

    length = TurnEnv().length
    with internals.without_object_store():
        algo = (training_step.DQN if run == "DQN" else training_step.SAC)(config=turn_config(run, act))
        try:
            buffer = algo.local_replay_buffer
            assert isinstance(buffer, ModuleTransitions) and buffer.multi_agent
            stored = {"x": 0, "y": 0}
            for _ in range(12):  # 5-step samples: episodes of 9 steps are cut mid-turn
                episodes = algo.env_runner.sample(num_timesteps=5, random_actions=True)
                buffer.add(episodes)
                for episode in episodes:
                    for agent, agent_episode in episode.agent_episodes.items():
                        stored[agent] += len(agent_episode)
            assert {m: len(b) for m, b in buffer.buffers.items()} == {
                "policy_x": stored["x"],
                "policy_y": stored["y"],
            }
            batches = buffer.sample(300, gamma=0.99)
            for agent in ("x", "y"):
                check_agent_rows(batches[f"policy_{agent}"], agent, length)
            every = {int(o[0]) for o in batches["policy_x"]["obs"]}
            assert every == {0, 2, 4, 6, 8}, "x's steps, at every turn, across the cuts"
            assert buffer.get_metrics()["num_module_steps_stored"] == {
                "policy_x": stored["x"],
                "policy_y": stored["y"],
            }
        finally:
            algo.stop()


@pytest.mark.slow
@pytest.mark.parametrize("run,act", [("DQN", "discrete"), ("SAC", "box")])
def test_several_modules_get_the_columns_rllibs_multi_agent_path_gives_them(run, act):
    from ray.rllib.policy.sample_batch import MultiAgentBatch, SampleBatch
    from ray.rllib.utils.replay_buffers.multi_agent_episode_buffer import MultiAgentEpisodeReplayBuffer

    with internals.without_object_store():
        algo = (training_step.DQN if run == "DQN" else training_step.SAC)(config=turn_config(run, act))
        try:
            episodes = algo.env_runner.sample(num_timesteps=40, random_actions=True)
            ours = ModuleTransitions(100, seed=0, multi_agent=True)
            ours.add(episodes)
            theirs = MultiAgentEpisodeReplayBuffer(capacity=100)
            theirs.add(episodes)
            learner = internals.local_learner(algo.learner_group)
            sampled = theirs.sample(num_items=16, n_step=1, gamma=0.99)
            rllib_batch = internals.learner_connector(learner)(
                rl_module=learner.module, batch={}, episodes=sampled, shared_data={}, metrics=None
            )
            our_batch = internals.learner_batch(
                learner,
                MultiAgentBatch({m: SampleBatch(c) for m, c in ours.sample(16).items()}, env_steps=16),
            ).policy_batches
            assert set(our_batch) == set(rllib_batch) == {"policy_x", "policy_y"}
            for module_id, theirs_module in rllib_batch.items():
                described = {
                    k: tree.map_structure(lambda t: (t.dtype, tuple(t.shape[1:])), theirs_module[k])
                    for k in theirs_module
                }
                assert {
                    k: tree.map_structure(lambda t: (t.dtype, tuple(t.shape[1:])), our_batch[module_id][k])
                    for k in described
                } == described
                assert set(our_batch[module_id].keys()) == set(theirs_module.keys())
        finally:
            algo.stop()


@pytest.mark.slow
def test_a_module_nobody_trains_gets_no_replay_and_the_others_train():
    with internals.without_object_store():
        algo = training_step.DQN(
            config=turn_config("DQN", "discrete").multi_agent(policies_to_train=["policy_x"])
        )
        try:
            for _ in range(3):
                result = algo.train()
            assert set(algo.local_replay_buffer.buffers) == {"policy_x"}
            learners = result["learners"]
            assert "qf_loss" in learners["policy_x"] and "qf_loss" not in learners.get("policy_y", {})
        finally:
            algo.stop()


class PassThrough(ConnectorV2):
    """A learner connector piece of the user's (it changes nothing): RLlib's replay path stays."""

    def __call__(self, *, rl_module, batch, episodes, **kwargs):
        return batch


@pytest.mark.slow
def test_rllibs_multi_agent_replay_with_int_agent_ids_checkpoints(tmp_path):
    """RLlib's path logs the buffer's per-agent metrics; keyed by int ids they failed the checkpoint."""
    from ray.rllib.algorithms.dqn import DQNConfig
    from ray.rllib.examples.envs.classes.multi_agent import MultiAgentCartPole

    config = (
        DQNConfig()
        .environment(MultiAgentCartPole, env_config={"num_agents": 2})
        .multi_agent(policies={"p0", "p1"}, policy_mapping_fn=lambda aid, *a, **k: f"p{aid}")
        .env_runners(num_env_runners=0)
        .training(train_batch_size=16, replay_buffer_config={"type": "MultiAgentEpisodeReplayBuffer"})
        .learners(learner_connector=lambda *spaces: PassThrough())
    )
    config.update_from_dict(
        {"num_steps_sampled_before_learning_starts": 20, "min_sample_timesteps_per_iteration": 40}
    )
    with internals.without_object_store():
        algo = training_step.DQN(config=config)
        try:
            assert training_step.why_not_transitions(algo) == "a learner connector of its own"
            for _ in range(2):
                result = algo.train()
            assert "qf_loss" in result["learners"]["p0"]
            assert set(result["replay_buffer"]["num_agent_steps_added"]) >= {"0", "1"}
            algo.save_to_path(str(tmp_path / "checkpoint"))
            assert (tmp_path / "checkpoint" / internals.ALGORITHM_STATE_FILE).is_file()
        finally:
            algo.stop()


@pytest.mark.slow
def test_prioritized_replay_updates_each_modules_priorities():
    config = turn_config("SAC", "box", replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer"})
    with internals.without_object_store():
        algo = training_step.SAC(config=config)
        try:
            for _ in range(3):
                algo.train()
            buffer = algo.local_replay_buffer
            assert buffer.prioritized and set(buffer.buffers) == {"policy_x", "policy_y"}
            for module_buffer in buffer.buffers.values():
                assert module_buffer.get_state()["max_priority"] != 1.0, "the TD errors reached it"
        finally:
            algo.stop()


@pytest.mark.slow
@pytest.mark.parametrize("stored", [True, False], ids=["store_buffer_in_checkpoints", "default"])
def test_a_checkpoint_carries_the_transitions_when_asked(tmp_path, stored):
    """RLlib 2.60's new stack reads store_buffer_in_checkpoints only on the old stack; here it works."""
    settings = {"store_buffer_in_checkpoints": stored, "min_sample_timesteps_per_iteration": 40}
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "SAC", "box", "box", False, **settings)
        again = built_algorithm(tmp_path, "SAC", "box", "box", False, **settings)
        try:
            algo.train()
            algo.train()
            assert len(algo.local_replay_buffer) >= 80
            algo.save_checkpoint(str(tmp_path / "ckpt"))
            again.load_checkpoint(str(tmp_path / "ckpt"))
            assert len(again.local_replay_buffer) == (len(algo.local_replay_buffer) if stored else 0)
            if stored:
                before, after = algo.local_replay_buffer.get_state(), again.local_replay_buffer.get_state()
                for saved, restored in zip(tree.flatten(before), tree.flatten(after), strict=True):
                    assert np.array_equal(saved, restored)
                again.train()  # training goes on from the restored rows
        finally:
            algo.stop()
            again.stop()


TURN_ENV = ROOT / "tests" / "data" / "envs" / "turn_env.py"


@pytest.mark.parametrize(
    "given,kind,noticed",
    [
        (None, "MultiAgentPrioritizedEpisodeReplayBuffer", False),
        ({"type": "EpisodeReplayBuffer"}, "MultiAgentEpisodeReplayBuffer", True),
        (
            {"type": "PrioritizedEpisodeReplayBuffer", "capacity": 500},
            "MultiAgentPrioritizedEpisodeReplayBuffer",
            True,
        ),
        (
            {"type": "MultiAgentPrioritizedEpisodeReplayBuffer"},
            "MultiAgentPrioritizedEpisodeReplayBuffer",
            False,
        ),
    ],
    ids=["default", "uniform", "prioritized", "multi-agent-named"],
)
def test_a_multi_agent_config_gets_a_multi_agent_buffer_with_a_beta(tmp_path, capsys, given, kind, noticed):
    """RLlib keeps its single-agent default for several policies, and replaces its defaults whole
    (beta too) when the type changes; both failed at the first replay sample."""
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    shutil.copy(TURN_ENV, tmp_path / "turn_env.py")
    config = {
        "env_config": {"act": "box"},
        "num_env_runners": 0,
        "policies": ["policy_x", "policy_y"],
        "policy_mapping_fn": "turn_env.policy_mapping",
        **({"replay_buffer_config": given} if given else {}),
    }
    (tmp_path / "exp.yaml").write_text(
        yaml.safe_dump({"exp": {"run": "SAC", "env": "turn_env.TurnEnv", "config": config}})
    )
    (exp,) = load_experiments(tmp_path / "exp.yaml")
    buffer = build_config(exp).config.replay_buffer_config
    assert buffer["type"] == kind
    assert buffer.get("beta") == (0.4 if "Prioritized" in kind else None)  # SAC's default
    assert buffer.get("capacity") == (given or {}).get("capacity", None if given else 1_000_000)
    assert ("holds one policy's episodes" in capsys.readouterr().err) == noticed


def test_module_transitions_restore_their_state_and_a_lone_buffers():
    """Checkpoints keep every module's rows; one from before modules held a lone buffer's state."""
    single = ModuleTransitions(100, seed=0, default_module="default_policy")
    single.add(chunks(1, 7, cuts=[3]))
    again = ModuleTransitions(100, seed=0)
    again.set_state(single.get_state())
    assert len(again) == 7 and set(again.buffers) == {"default_policy"}
    lone = TransitionReplayBuffer(100, seed=0)
    lone.add(chunks(2, 5, cuts=[]))
    old = ModuleTransitions(100, seed=0)
    old.set_state(lone.get_state())
    batch = old.sample(50, gamma=GAMMA)["default_policy"]
    check_rows(batch, {2: 5})
    assert old.get_metrics() == lone.get_metrics() | {"num_env_steps_sampled_lifetime": 50}
