"""RLlib training on the stand-in Unity player, through train.py and rollout.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from envsdk import substitutions
from tests.helpers import (
    ROOT,
    export_and_check_brains,
    needs_xvfb,
    player_pids,
    progress_rows,
    rollout_here,
    trial_dirs,
)


def _no_players_left(before: set[int]) -> None:
    deadline = time.time() + 15
    while player_pids() - before and time.time() < deadline:
        time.sleep(0.3)
    assert not player_pids() - before, "players or Xvfb servers left after training"


def test_chase_reaches_its_stated_return_and_rolls_out(train, tmp_path):
    before = player_pids()
    out = train("-f", "configs/unity-chase.yaml", "--checkpoint-at-end", timeout=400)
    assert out.returncode == 0
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    assert float(rows[-1]["env_runners/episode_return_mean"]) >= 0.85  # the YAML's stop target
    assert float(rows[0]["env_runners/episode_return_mean"]) < 0.85
    last = rows[-1]
    assert 0.0 <= float(last["env_runners/unity/Chase/Reached"]) <= 1.0  # stats channel -> metrics
    assert float(last["env_runners/unity/player_threads"]) >= 1
    assert float(last["env_runners/unity/player_rss_mb"]) > 1
    _no_players_left(before)
    roll = rollout_here(str(trial), "--episodes", "3", "--no-out")
    assert roll.returncode == 0, roll.stderr[-2000:]
    assert roll.stdout.count("episode ") == 3
    _no_players_left(before)
    # The round trip: the exported brain plays the game with no trainer, as in a Unity build.
    export_and_check_brains(trial, tmp_path)
    greedy = rollout_here(str(trial), "--episodes", "50", "--no-explore", "--no-out")
    played = subprocess.run(
        [sys.executable, "-m", "unity_bridge.standin.player", "--game", "chase", "--max-steps", "30",
         "-nographics", "--brain", str(tmp_path / "brains"), "--episodes", "50"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert played.returncode == 0, played.stdout + played.stderr[-2000:]
    brain = float(re.search(r"return mean (-?[\d.]+)", played.stdout).group(1))
    trainer = float(re.search(r"return mean (-?[\d.]+)", greedy.stdout).group(1))
    # Same policy, other start positions (the player seeds itself): 50 episodes each, std about 0.4
    # (a mean's standard error 0.06; with 20 episodes, 0.09, a greedy policy once measured 0.578).
    assert abs(brain - trainer) < 0.3, (brain, trainer)
    assert brain > 0.6, brain  # random play returns about 0.3
    _no_players_left(before)


@needs_xvfb
def test_crash_recovery_schedule_and_graphics_monitor(train, tmp_path):
    """One run: a player that crashes mid-training, env parameters that follow a schedule,
    and two env runners of which only the first renders (on an Xvfb of its own)."""
    before = player_pids()
    logs = tmp_path / "logs"
    schedule = json.dumps({"track_length": [[0, 4], [1000, 7]]})
    out = train(
        "-f", "configs/unity-chase.yaml", "--stop-iters", "3",
        "--config.curriculum=unity_bridge.schedule.parameter_schedule",
        f"--config.env_config.parameter_schedule={schedule}",
        f"--config.env_config.log_folder={logs}",
        "--config.env_config.additional_args=[--crash-after, '700']",
        "--config.env_config.no_graphics_monitor=true",
        "--config.env_config.virtual_display=auto",
        "--config.num_env_runners=2",
        "--config.train_batch_size=1000",  # 3 iterations reach the crash (700) and the schedule (1000)
        timeout=400,
    )  # fmt: skip
    assert out.returncode == 0
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    assert len(rows) == 3
    assert max(float(r["env_runners/unity/player_restarts"]) for r in rows) >= 1
    monitor, other = (logs / "Player-32.log").read_text(), (logs / "Player-64.log").read_text()
    assert "graphics True" in monitor and "graphics False" in other
    every = "".join(p.read_text() for p in logs.glob("*.log"))
    assert "fault switch: crashing" in every  # kept in Player-N.previous.log after the restart
    assert "environment parameter track_length = 7" in every
    _no_players_left(before)


@needs_xvfb
def test_masked_hybrid_and_camera_behaviors_learn_side_by_side(train, tmp_path):
    """configs/unity-seekwatch.yaml: default models only, one remote env runner.

    Seeker (vector, masked hybrid actions): its return rises by at least 0.3 (random play about
    0.2; walking straight there about 0.95).  Watcher (16x16x3 camera, Discrete(3), no mask):
    its share of right answers rises from chance (1/3) to over 0.5.  The player exits on any
    masked action it receives, so a clean run with no player restart shows none arrived.
    """
    before = player_pids()
    logs = tmp_path / "logs"
    # Seeded, the player and RLlib: one CI run's Seeker rose by 0.28 unseeded, where most rise by more.
    out = train("-f", "configs/unity-seekwatch.yaml", "--stop-iters", "6", "--checkpoint-at-end",
                f"--config.env_config.log_folder={logs}", "--config.seed=3", "--config.env_config.seed=3",
                timeout=500)  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:]
    seeker = "Box(3,) flattened -> MLP [64, 64] tanh; actions hybrid 1 continuous + Discrete(3), masked"
    assert f"model Seeker: {seeker}" in out.stdout
    assert (
        "model Watcher: 16x16x3 float32 image -> CNN 2 layers relu -> MLP [64, 64] tanh; actions Discrete(3)"
        in out.stdout
    )
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    seeker = [float(r["env_runners/module_episode_returns_mean/Seeker"]) for r in rows]
    right = [float(r["env_runners/unity/SeekWatch/WatcherRight"]) for r in rows]
    assert seeker[-1] > seeker[0] + 0.3, seeker
    assert right[0] < 0.45 and right[-1] > 0.5, right
    assert max(float(r["env_runners/unity/player_restarts"]) for r in rows) == 0
    log = "".join(p.read_text() for p in logs.glob("*.log"))
    assert (
        "masked action" not in log and "outside [-1, 1]" not in log and "trainer closed the connection" in log
    )
    _no_players_left(before)
    roll = rollout_here(str(trial), "--episodes", "2", "--no-out")
    assert roll.returncode == 0, roll.stderr[-2000:]
    # Both kinds as Unity brains: a masked hybrid (two inputs, three action outputs) and a camera only.
    index = export_and_check_brains(trial, tmp_path)
    assert {b: e["file"] for b, e in index["behaviors"].items()} == {
        "Seeker": "Seeker.onnx",
        "Watcher": "Watcher.onnx",
    }
    _no_players_left(before)


@needs_xvfb
def test_each_game_of_an_env_runner_has_its_own_log_and_port(train, tmp_path):
    """Review item j: RLlib gives every sub-env of an env runner the same context (vector_index 0);
    each game still gets its own slot: its own port, its own log, and only the first renders."""
    logs = tmp_path / "logs"
    out = train(
        "-f", "configs/unity-chase.yaml", "--stop-iters", "1", "--env", "unity-single",
        "--config.num_env_runners=1", "--config.num_envs_per_env_runner=2",
        f"--config.env_config.log_folder={logs}",
        "--config.env_config.no_graphics=false", "--config.env_config.no_graphics_monitor=true",
        "--config.env_config.virtual_display=auto",
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-2000:]
    first, second = (logs / "Player-32.log").read_text(), (logs / "Player-33.log").read_text()
    assert "graphics True" in first and "graphics False" in second
    ports = {re.search(r"port (\d+)", log).group(1) for log in (first, second)}
    assert len(ports) == 2


def test_user_mistakes_with_unity_games_exit_2(train, tmp_path):
    cases = [
        (["--config.env_config.file_name=builds/NoSuchGame"], "Unity player 'builds/NoSuchGame' not found"),
        (["--config.env_config.timeout=5"], "unknown Unity setting 'timeout'"),
        (["--config.env_config.additional_args=[--api-version, '2.0.0']"], "speaks ML-Agents API 2.0.0"),
        (["--config.env_config.width=big"], "width must be an integer, got 'big'"),
    ]
    before = player_pids()
    for extra, message in cases:  # caught before Ray starts (the player is started once, to ask it)
        out = train("-f", "configs/unity-chase.yaml", *extra)
        assert out.returncode == 2, (extra, out.stderr[-1500:])
        assert message in out.stderr and "Traceback" not in out.stderr
    # A player that crashes at every start: the error says so and names its log, which says why.
    logs = tmp_path / "logs"
    out = train("-f", "configs/unity-chase.yaml", "--config.env_config.additional_args=[--crash-at-start]",
                f"--config.env_config.log_folder={logs}")  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "the Unity player exited before connecting (exit code 3)" in out.stderr
    assert str(logs / "Player-0.log") in out.stderr
    assert "fault switch: crashing at start" in (logs / "Player-0.log").read_text()
    _no_players_left(before)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_no_player_outlives_an_interrupted_training(ray_address, tmp_path, sig):
    before = player_pids()
    proc = subprocess.Popen(
        [
            sys.executable, "train.py", "-f", "configs/unity-chase.yaml", "--stop-iters", "200",
            "--stop-reward", "100", "--ray-address", ray_address, "--local-dir", str(tmp_path),
        ],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.time() + 90
        while not (tmp_path / "unity-chase").exists() or not player_pids() - before:
            assert time.time() < deadline and proc.poll() is None, "training did not start"
            time.sleep(0.5)
        time.sleep(3)  # a few sampling rounds on the env runner's player
        assert player_pids() - before
        os.killpg(proc.pid, sig)  # Ctrl-C in a terminal signals the whole foreground group
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    _no_players_left(before)


def test_dqn_replays_a_unity_games_agents(train, tmp_path):
    """Off-policy replay on a Unity game: masked actions, a new agent id every episode (whose
    per-agent metrics are dropped, the agent step counts among them)."""
    before = player_pids()
    settings = {
        "run": "DQN",
        "env": "unity",
        "stop": {"training_iteration": 2},
        "checkpoint_at_end": True,
        "config": {
            "env_config": {
                "file_name": "builds/Chase",
                "no_graphics": True,
                "additional_args": ["--max-steps", "30"],
            },
            "num_env_runners": 0,
            "train_batch_size": 64,
            "num_steps_sampled_before_learning_starts": 64,
            "min_sample_timesteps_per_iteration": 200,
        },
    }
    (tmp_path / "chase-dqn.yaml").write_text(json.dumps({"chase-dqn": settings}))
    out = train("-f", str(tmp_path / "chase-dqn.yaml"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    (trial,) = trial_dirs(train.results)
    last = progress_rows(trial)[-1]
    assert float(last["replay_buffer/num_module_steps_stored/Chase"]) > 0
    assert float(last["learners/Chase/qf_loss"]) > 0
    _no_players_left(before)


@pytest.mark.parametrize(
    "stock",
    [pytest.param(False, marks=pytest.mark.substitution(substitutions.AGENTS_BATCHED)), True],
    ids=["agents-batched", "stock"],
)
def test_chase_with_4_agents_counts_agent_steps_and_reports_the_mean_per_agent(
    train, tmp_path, monkeypatch, stock
):
    """``count_steps_by: agent_steps`` on a game that gives every agent a new id each episode, and
    the mean return per agent-episode (mlagents-learn's "Mean Reward") beside the episode's return:
    RLlib's loop sums an episode's agents (a round of the game), the agents-batched loop's episode is
    one agent's life."""
    if stock:
        monkeypatch.setenv(substitutions.STOCK, substitutions.AGENTS_BATCHED)
    before = player_pids()
    settings = {
        "run": "PPO",
        "env": "unity",
        "stop": {"training_iteration": 2, "env_runners/agent_return_mean": 2.0},
        "config": {
            "env_config": {
                "file_name": "builds/Chase",
                "no_graphics": True,
                "additional_args": ["--agents", "4"],
            },
            "num_env_runners": 0,
            "count_steps_by": "agent_steps",
            "train_batch_size": 200,
            "minibatch_size": 50,
            "num_epochs": 1,
        },
    }
    (tmp_path / "chase-agents.yaml").write_text(json.dumps({"chase-agents": settings}))
    out = train("-f", str(tmp_path / "chase-agents.yaml"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    assert len(rows) == 2
    assert not [
        k for k in rows[-1] if k.startswith("env_runners/num_agent_steps_sampled/")
    ]  # no per-id columns
    lifetime = 0.0
    for row in rows:
        agent_steps = float(row["env_runners/num_agent_steps_sampled"])
        assert agent_steps >= 200 > float(row["env_runners/num_env_steps_sampled"])
        lifetime += agent_steps
        assert float(row["env_runners/num_agent_steps_sampled_lifetime"]) == lifetime
        per_agent, summed = (
            float(row["env_runners/agent_return_mean"]),
            float(row["env_runners/episode_return_mean"]),
        )
        assert (
            -0.3 <= per_agent <= 1.0
        )  # an agent-episode: -0.01 a step for at most 30 steps, +1 at the target
        assert float(row["env_runners/module_agent_return_mean/Chase"]) == per_agent
        if stock:
            # The sum over an episode's agents: each scene episode starts with the 4 agents, each an
            # agent-episode of its own, and those that end are replaced. The two means are over windows
            # of different lengths (episodes, agent-episodes), so their ratio is near 4, not exactly it.
            assert summed / per_agent >= 2.5
        else:
            assert summed == pytest.approx(per_agent)
    said = f"notice: {substitutions.AGENTS_BATCHED}: each policy acts" in out.stderr
    assert said is not stock, out.stderr[-2000:]
    _no_players_left(before)
