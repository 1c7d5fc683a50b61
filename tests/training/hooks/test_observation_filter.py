"""The MeanStdFilter connector on every space kind, and its statistics across env runners."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from ray.rllib.env.single_agent_episode import SingleAgentEpisode

from envsdk.training.hooks.observation_filter import ObservationMeanStdFilter, RunningMeanStd

SPACE = gym.spaces.Dict(
    {
        "action_mask": gym.spaces.Box(0, 1, (3,), np.float32),
        "observations": gym.spaces.Dict(
            {
                "camera": gym.spaces.Box(0, 255, (6, 6, 3), np.uint8),
                "vector": gym.spaces.Box(-5, 5, (2,), np.float32),
                "parts": gym.spaces.Tuple(
                    (gym.spaces.Discrete(4), gym.spaces.Box(-1, 1, (3, 2), np.float64))
                ),
            }
        ),
    }
)
NORMALISED = [("observations", "vector"), ("observations", "parts", 1)]


def run(connector: ObservationMeanStdFilter, observations: list) -> list:
    """Pass each observation through the connector as an env runner does; return what it made of them."""
    out = []
    for obs in observations:
        episode = SingleAgentEpisode(
            observations=[obs], observation_space=SPACE, action_space=gym.spaces.Discrete(3)
        )
        connector(rl_module=None, batch={}, episodes=[episode])
        out.append(episode.get_observations(indices=-1))
    return out


def samples(n: int, seed: int) -> list:
    SPACE.seed(seed)
    return [SPACE.sample() for _ in range(n)]


def test_only_float_parts_are_normalised_and_the_space_says_so():
    connector = ObservationMeanStdFilter(SPACE, gym.spaces.Discrete(3))
    out_space = connector.observation_space
    assert out_space["action_mask"] == SPACE["action_mask"]
    assert out_space["observations"]["camera"] == SPACE["observations"]["camera"]
    assert out_space["observations"]["parts"][0] == gym.spaces.Discrete(4)
    assert out_space["observations"]["vector"].low.min() == -10.0
    raw = samples(50, seed=0)
    made = run(connector, [*raw])
    for before, after in zip(raw, made, strict=True):
        np.testing.assert_array_equal(after["action_mask"], before["action_mask"])
        np.testing.assert_array_equal(after["observations"]["camera"], before["observations"]["camera"])
        assert after["observations"]["parts"][0] == before["observations"]["parts"][0]
        assert out_space.contains(after)
    vectors = np.stack([r["observations"]["vector"] for r in raw])
    expected_last = (vectors[-1] - vectors.mean(0)) / (vectors.std(0, ddof=1) + 1e-8)
    np.testing.assert_allclose(made[-1]["observations"]["vector"], expected_last, rtol=1e-5)


def test_statistics_are_merged_once_across_env_runners():
    driver = ObservationMeanStdFilter(SPACE, gym.spaces.Discrete(3))
    remotes = [ObservationMeanStdFilter(SPACE, gym.spaces.Discrete(3)) for _ in range(2)]
    seen = []
    for sync in range(3):  # three training iterations: sample on each runner, then sync
        for i, remote in enumerate(remotes):
            data = samples(10 + i, seed=100 * sync + i)
            run(remote, data)
            seen += data
        merged = driver.merge_states([r.get_state() for r in remotes])
        for remote in remotes:
            remote.set_state(pickle.loads(pickle.dumps(merged)))  # as Ray ships it
    vectors = np.stack([s["observations"]["vector"] for s in seen])
    part = merged["agents"][None]["seen"][NORMALISED[0]]
    assert part.count == len(seen) == 3 * 21
    np.testing.assert_allclose(part.mean, vectors.mean(0), rtol=1e-6)
    np.testing.assert_allclose(part.std, vectors.std(0, ddof=1), rtol=1e-6)
    assert sorted(merged["agents"][None]["seen"], key=str) == sorted(NORMALISED, key=str)


def test_frozen_filter_keeps_the_checkpoint_statistics_and_the_raw_observations():
    trained = ObservationMeanStdFilter(SPACE, gym.spaces.Discrete(3))
    run(trained, samples(30, seed=1))
    state = pickle.loads(pickle.dumps(trained.get_state()))  # a checkpoint
    frozen = ObservationMeanStdFilter(SPACE, gym.spaces.Discrete(3), update_stats=False, keep_raw=True)
    frozen.set_state(state)
    probe = samples(5, seed=2)
    episode = SingleAgentEpisode(
        observations=[probe[0]], observation_space=SPACE, action_space=gym.spaces.Discrete(3)
    )
    frozen(rl_module=None, batch={}, episodes=[episode])
    assert frozen.get_state()["agents"][None]["seen"][NORMALISED[0]].count == 30  # unchanged
    kept = episode.custom_data["envsdk_raw_observations"][0]
    np.testing.assert_array_equal(kept["observations"]["vector"], probe[0]["observations"]["vector"])
    part = state["agents"][None]["seen"][NORMALISED[0]]
    expected = np.clip((probe[0]["observations"]["vector"] - part.mean) / (part.std + 1e-8), -10, 10)
    np.testing.assert_allclose(episode.get_observations(-1)["observations"]["vector"], expected, rtol=1e-5)


@pytest.mark.parametrize("split", [1, 7, 50])
def test_running_statistics_merge_like_one_pass(split):
    data = np.random.default_rng(split).normal(3.0, 2.0, size=(60, 4))
    whole, first, second = RunningMeanStd.empty((4,)), RunningMeanStd.empty((4,)), RunningMeanStd.empty((4,))
    for row in data:
        whole.push(row)
    for row in data[:split]:
        first.push(row)
    for row in data[split:]:
        second.push(row)
    first.merge(second)
    assert first.count == whole.count == 60
    np.testing.assert_allclose(first.mean, data.mean(0))
    np.testing.assert_allclose(first.std, data.std(0, ddof=1))
    np.testing.assert_allclose(whole.std, data.std(0, ddof=1))


def run_agents(
    connector: ObservationMeanStdFilter, steps: list[tuple[str, str, object]], space=SPACE
) -> None:
    """Each (agent id, policy id, observation) through the connector as a multi-agent runner passes its
    agents' episodes (an agent's own space unknown to the env when ``space`` is None: Unity's new agents)."""
    for agent, policy, obs in steps:
        episode = SingleAgentEpisode(
            observations=[obs], observation_space=space, action_space=gym.spaces.Discrete(3),
            agent_id=agent, module_id=policy,
        )  # fmt: skip
        connector(rl_module=None, batch={}, episodes=[episode])


@pytest.mark.parametrize(
    "agent_space", [SPACE, None], ids=["env-names-the-agents", "agents-new-each-episode"]
)
def test_multi_agent_statistics_are_kept_per_policy_as_ml_agents_normalises_per_behavior(agent_space):
    """Agents of one policy (new ids each episode, as a Unity game's) share one set of statistics;
    another policy keeps its own; a driver merges them from two runners; a checkpoint restores them."""
    env_space = gym.spaces.Dict({"a/0": SPACE})
    data = samples(40, seed=3)
    steps = [(f"a/{i % 7}", "walker" if i % 3 else "jumper", obs) for i, obs in enumerate(data)]
    remotes = [
        ObservationMeanStdFilter(env_space, gym.spaces.Discrete(3), multi_agent=True) for _ in range(2)
    ]
    run_agents(remotes[0], steps[:25], agent_space)
    run_agents(remotes[1], steps[25:], agent_space)
    driver = ObservationMeanStdFilter(env_space, gym.spaces.Discrete(3), multi_agent=True)
    merged = pickle.loads(pickle.dumps(driver.merge_states([r.get_state() for r in remotes])))
    assert merged["keyed_by"] == "policy" and set(merged["agents"]) == {"walker", "jumper"}
    for policy in ("walker", "jumper"):
        vectors = np.stack([o["observations"]["vector"] for _, p, o in steps if p == policy])
        part = merged["agents"][policy]["seen"][NORMALISED[0]]
        assert part.count == len(vectors)
        np.testing.assert_allclose(part.mean, vectors.mean(0), rtol=1e-6)
    restored = ObservationMeanStdFilter(env_space, gym.spaces.Discrete(3), multi_agent=True)
    restored.set_state(merged)
    walker = merged["agents"]["walker"]["seen"][NORMALISED[0]].count
    run_agents(restored, [("a/99", "walker", data[0])], agent_space)  # an agent never seen: its policy's
    assert restored.get_state()["agents"]["walker"]["seen"][NORMALISED[0]].count == walker + 1


def test_an_old_per_agent_checkpoint_seeds_each_policy_with_its_first_agents_statistics():
    env_space = gym.spaces.Dict({"p0": SPACE})
    old = ObservationMeanStdFilter(env_space, gym.spaces.Discrete(3), multi_agent=True)
    run_agents(old, [("p0", "shared", obs) for obs in samples(12, seed=4)])
    state = old.get_state()
    state = {
        "clip_by_value": state["clip_by_value"],
        "agents": {"p0": state["agents"]["shared"]},
    }  # 0.3's form
    new = ObservationMeanStdFilter(env_space, gym.spaces.Discrete(3), multi_agent=True)
    new.set_state(state)
    run_agents(new, [("p0", "shared", samples(1, seed=5)[0])])
    assert new.get_state()["agents"]["shared"]["seen"][NORMALISED[0]].count == 13  # 12 carried over
