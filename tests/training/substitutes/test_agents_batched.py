"""Many agents, batched (envsdk/training/substitutes/sampling/agents_batched.py) against RLlib's own
multi-agent env runner on the stand-in Unity games.

With the same weights and no exploration both runners drive the same games with the same actions,
so every agent's life holds the same observations, actions, rewards and ends, whether RLlib's loop
keeps it in an episode of the game's round (relayed across episodes, cut across samples) or the
batched one in an episode of its own.  Then: the episodes RLlib's learner reads, chunks that go on
in the next sample, the runner's counters and episode metrics, and the configs it leaves to RLlib.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import tree
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

from envsdk import substitutions
from envsdk.envs.faults.records import ObservationFault
from envsdk.training.substitutes.sampling.agents_batched import AgentsBatchedRunner
from tests.helpers import PLAYERS, built_from, player_pids

pytestmark = pytest.mark.substitution(substitutions.AGENTS_BATCHED)

# game -> (its stand-in arguments, what its actions are)
GAMES = {
    "Chase": ["--agents", "4", "--max-steps", "12"],  # a masked Discrete action, lives ending by turns
    "3DBall": ["--agents", "6", "--max-steps", "15"],  # a Box action (continuous)
    "Dodgeball": ["--agents", "2", "--max-steps", "20"],  # two behaviors (teams), a policy each
}


def _built(
    tmp_path: Path, game: str, extra: tuple[str, ...] = (), env: dict | None = None, **config: Any
) -> Any:
    settings = {
        "run": "PPO",
        "env": "unity",
        "config": {
            "env_config": {
                "file_name": str(PLAYERS / "builds" / game),
                "no_graphics": True,
                "additional_args": [*GAMES[game], *extra],
                **(env or {}),
            },
            "num_env_runners": 0,
            "train_batch_size": 40,
            "minibatch_size": 20,
            "seed": 3,
            **config,
        },
    }
    return built_from(tmp_path, settings)


def _lives(samples: list[list[Any]]) -> dict[str, dict[str, list]]:
    """Each agent's steps over every sample's episodes (chunks and relays joined by agent id):
    the observations it acted on, its actions, rewards, and how its last step ended."""
    lives: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for episodes in samples:
        for episode in episodes:
            for aid, single in episode.agent_episodes.items():
                n = len(single)
                if not n:
                    continue
                life = lives[str(aid)]
                obs = single.get_observations(slice(0, n))
                life["obs"] += [tree.map_structure(lambda x, i=i: x[i], obs) for i in range(n)]
                life["actions"] += list(single.get_actions(slice(0, n)))
                life["rewards"] += list(np.asarray(single.get_rewards(slice(0, n)), np.float64))
                # RLlib's episode marks every agent terminated once all are done, relayed ones too
                # (MultiAgentEpisode.add_env_step's "Case 2"): a termination is one not truncated
                life["ends"] += [False] * (n - 1) + [single.is_terminated and not single.is_truncated]
    return lives


def _same_lives(want: dict, have: dict) -> None:
    complete = [aid for aid in want if aid in have]
    assert len(complete) >= 0.8 * len(want) > 0, (sorted(want), sorted(have))
    for aid in complete:
        a, b = want[aid], have[aid]
        n = min(len(a["actions"]), len(b["actions"]))  # the last sample may cut them differently
        assert n > 0, aid
        for i in range(n):
            tree.map_structure(np.testing.assert_allclose, a["obs"][i], b["obs"][i])
            tree.map_structure(np.testing.assert_array_equal, a["actions"][i], b["actions"][i])
        assert np.allclose(a["rewards"][:n], b["rewards"][:n]), aid
        assert a["ends"][: n - 1] == b["ends"][: n - 1], aid


@pytest.mark.slow
@pytest.mark.parametrize("game", list(GAMES))
def test_each_agent_lives_as_in_rllibs_runner(tmp_path: Path, game: str) -> None:
    before = player_pids()
    built = _built(tmp_path, game)  # one game each: agent ids repeat across a runner's games
    assert built.sampler == "agents-batched"
    config = built.config.copy(copy_frozen=False)
    rllib = config.copy(copy_frozen=False).env_runners(env_runner_cls=None)
    theirs = MultiAgentEnvRunner(config=rllib, worker_index=0)
    ours = AgentsBatchedRunner(config=config, worker_index=0)
    try:
        ours.module.set_state(theirs.module.get_state())
        calls = [{"num_timesteps": 30}, {"num_timesteps": 30}, {"num_timesteps": 20}]
        got, expected = [], []
        for call in calls:
            expected.append(theirs.sample(explore=False, **call))
            got.append(ours.sample(explore=False, **call))
            assert ours.why_not() is None
        _same_lives(_lives(expected), _lives(got))
        episodes = [e for sample in got for e in sample]
        assert all(isinstance(e, MultiAgentEpisode) and len(e.agent_episodes) == 1 for e in episodes)
        for episode in episodes:
            episode.validate()
            (single,) = episode.agent_episodes.values()
            assert single.module_id in config.policies and len(episode) == len(single) > 0
        assert any(e.is_done for e in episodes) and any(not e.is_done for e in episodes)
        # a life ends terminated by the game, or truncated at --max-steps: never both, and RLlib's
        # learner bootstraps the truncated ones from their last observation
        lengths: dict[str, int] = defaultdict(int)  # a life's steps over its chunks
        for e in episodes:
            lengths[e.id_] += len(e)
        steps = int(GAMES[game][GAMES[game].index("--max-steps") + 1])
        assert not any(e.is_terminated and e.is_truncated for e in episodes)
        assert any(e.is_truncated for e in episodes) and max(lengths.values()) <= steps
        if game != "Dodgeball":  # whose round's end interrupts the players still in it
            assert {lengths[e.id_] for e in episodes if e.is_truncated} <= {steps - 1, steps}
    finally:
        theirs.stop()
        ours.stop()
    assert player_pids() <= before


@pytest.mark.slow
def test_a_sample_explores_counts_and_continues_its_lives_in_the_next(tmp_path: Path) -> None:
    """Two games of 4 agents in one runner (stepped at once), sampled with exploration twice."""
    built = _built(tmp_path, "Chase", num_envs_per_env_runner=2)
    ours = AgentsBatchedRunner(config=built.config.copy(copy_frozen=False), worker_index=0)
    try:
        torch.manual_seed(0)
        first = ours.sample(num_timesteps=26)
        second = ours.sample(num_timesteps=24)
        metrics = ours.get_metrics()
    finally:
        ours.stop()
    agents = 4 * 2
    for sample, frames in ((first, 13), (second, 12)):
        # a row per agent per frame, but in the frames before an ended agent's successor arrives
        assert 0.75 * frames * agents <= sum(len(e) for e in sample) <= frames * agents
        for episode in sample:
            (single,) = episode.agent_episodes.values()
            assert set(single.extra_model_outputs) == {"action_dist_inputs", "action_logp", "weights_seq_no"}
            logp = single.get_extra_model_outputs("action_logp", slice(0, len(single)))
            assert np.all(logp <= 0) and np.all(np.isfinite(logp))
            assert len(single) <= 12  # --max-steps: no life is longer
    ongoing = {e.id_: e for e in first if not e.is_done}
    continued = [e for e in second if e.id_ in ongoing]
    assert continued  # the lives cut at the first sample's end go on in the second
    for episode in continued:
        before, after = ongoing[episode.id_], episode
        (a,), (b,) = before.agent_episodes.values(), after.agent_episodes.values()
        assert b.t_started == a.t and a.agent_id == b.agent_id
        tree.map_structure(np.testing.assert_array_equal, a.get_observations(-1), b.get_observations(0))
    done = [e for e in first + second if e.is_done]
    returns = []
    for episode in done:  # an episode's return: its chunks' rewards together, as RLlib's metrics sum them
        chunks = [e for e in first if e.id_ == episode.id_ and e is not episode]
        returns.append(sum(c.get_return() for c in [*chunks, episode]))
    assert metrics["num_env_steps_sampled"].peek() == 50  # 13 and 12 frames of 2 games
    assert metrics["num_episodes"].peek() == len(done)
    assert metrics["episode_return_mean"].peek() == pytest.approx(np.mean(returns[-100:]), rel=1e-5)
    assert metrics["num_module_steps_sampled"]["Chase"].peek() == sum(len(e) for e in first + second)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("game", "config", "why"),
    [
        (
            "Chase",
            {"callbacks_on_episode_step": "batch_hooks.step"},
            "on_episode_step callback batch_hooks.step",
        ),
        ("Chase", {"model_config": {"use_lstm": True, "max_seq_len": 4}}, "recurrent"),
        ("Dodgeball", {"self_play": {"save_steps": 100}}, "self_play"),
        ("Chase", {}, f"stock: {substitutions.AGENTS_BATCHED} off"),
    ],
)
def test_configs_it_does_not_cover_sample_with_rllibs_runner(
    tmp_path, monkeypatch, capsys, game, config, why
) -> None:
    (tmp_path / "batch_hooks.py").write_text("def step(**kwargs):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    if not config:
        monkeypatch.setenv(substitutions.STOCK, substitutions.AGENTS_BATCHED)
    built = _built(tmp_path, game, **config)
    assert built.config.env_runner_cls is None and built.sampler.startswith("rllib") and why in built.sampler
    assert ("notice: agents-batched" in capsys.readouterr().err) is False


@pytest.mark.slow
@pytest.mark.substitution(substitutions.AGENTS_BATCHED, substitutions.ENV_GUARD)
def test_a_non_finite_observation_is_named_by_the_env_guard(tmp_path: Path) -> None:
    """The loop steps the games itself: the env guard still checks what they return, per agent."""
    built = _built(tmp_path, "Chase", extra=("--nan-after", "5"))
    ours = AgentsBatchedRunner(config=built.config.copy(copy_frozen=False), worker_index=0)
    try:
        with pytest.raises(ObservationFault, match=r"agent 'Chase/\d+'.*non-finite observation.*at step \d+"):
            ours.sample(num_timesteps=20)
    finally:
        ours.stop()


@pytest.mark.slow
def test_observation_filter_normalises_each_frame_as_rllibs_connector_keeps_it(tmp_path: Path) -> None:
    """``observation_filter: MeanStdFilter`` (mlagents-learn's ``normalize``): the loop normalises
    each frame's observations in one batch with the connector's own statistics, which then hold
    every raw observation the games returned, and the episodes keep the normalised ones."""
    built = _built(tmp_path, "3DBall", observation_filter="MeanStdFilter")
    assert built.sampler == "agents-batched"
    ours = AgentsBatchedRunner(config=built.config.copy(copy_frozen=False), worker_index=0)
    raw: list[np.ndarray] = []
    games = ours.games()
    original = games[0].observation
    games[0].observation = lambda step: raw.append(original(step)) or raw[-1]  # type: ignore[method-assign]
    try:
        episodes = ours.sample(num_timesteps=40)
        (stats,) = ours._filter.get_state()["agents"].values()  # type: ignore[union-attr]
    finally:
        ours.stop()
    ((seen),) = stats["seen"].values()
    seen_raw = np.stack(raw)
    assert seen.count == len(seen_raw)
    np.testing.assert_allclose(seen.mean, seen_raw.mean(axis=0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(seen.std, seen_raw.std(axis=0, ddof=1), rtol=1e-4, atol=1e-6)
    kept = np.concatenate(
        [e.agent_episodes[next(iter(e.agent_episodes))].get_observations() for e in episodes]
    )
    assert np.abs(kept).max() <= 10.0 and abs(float(kept.mean())) < 0.5  # normalised and clipped at 10
    assert not np.allclose(kept[: len(seen_raw)].mean(), seen_raw.mean())


@pytest.mark.slow
def test_episode_horizon_cuts_a_life_that_goes_on_from_its_last_observation(tmp_path: Path) -> None:
    """``episode_horizon: 5``: every life is cut after 5 decisions, truncated, and the agent (the same
    id, in the same game) goes on in a new episode from the observation it was cut at."""
    built = _built(tmp_path, "Chase", env={"episode_horizon": 5}, num_envs_per_env_runner=2)
    ours = AgentsBatchedRunner(config=built.config.copy(copy_frozen=False), worker_index=0)
    try:
        first = ours.sample(num_timesteps=40)
        second = ours.sample(num_timesteps=20)  # where the lives cut in the first one's last frame go on
        small = [ours.sample(num_timesteps=4) for _ in range(8)]  # 2 frames each: a life spans samples
    finally:
        ours.stop()
    singles = [single for e in first + second for single in e.agent_episodes.values()]
    assert max(len(s) for s in singles) <= 5
    cut = [s for e in first for s in e.agent_episodes.values() if s.is_truncated and len(s) == 5]
    assert cut
    for single in cut:
        last = tree.flatten(single.get_observations(-1))
        starts = [tree.flatten(s.get_observations(0)) for s in singles if s.agent_id == single.agent_id]
        assert any(all(map(np.array_equal, last, first)) for first in starts if first is not last), (
            single.agent_id
        )
    lengths: dict[str, int] = defaultdict(int)  # a life's steps over its chunks
    for e in (e for sample in small for e in sample):
        lengths[e.id_] += len(e)
    ended = {e.id_ for sample in small for e in sample if e.is_truncated}
    assert ended and max(lengths.values()) <= 5 and any(lengths[i] == 5 for i in ended)


@pytest.mark.slow
def test_whole_episodes_are_rounds_of_the_game_sampled_by_rllibs_loop(tmp_path: Path) -> None:
    """``sample(num_episodes=N)`` (evaluation by episodes): RLlib's loop, whose episode is a round
    of the game with all its agents; the next sample by timesteps starts the lives afresh."""
    built = _built(tmp_path, "Chase")
    ours = AgentsBatchedRunner(config=built.config.copy(copy_frozen=False), worker_index=0)
    try:
        rounds = ours.sample(num_episodes=1, explore=False)
        after = ours.sample(num_timesteps=20)
    finally:
        ours.stop()
    assert len(rounds) == 1 and rounds[0].is_done and len(rounds[0].agent_episodes) >= 4
    assert all(len(e.agent_episodes) == 1 for e in after) and sum(len(e) for e in after) >= 0.75 * 20 * 4
