"""Self-play with ELO (``self_play:``): the ledger's rules, a game where skill matters, Unity, resume."""

from __future__ import annotations

import itertools
import json
import math
import re
import signal
import subprocess
from pathlib import Path

import numpy as np
import pytest

from envsdk import internals
from envsdk.config.own_keys.self_play import SelfPlaySettings, TeamsByName
from envsdk.errors import UserError
from envsdk.training.hooks.self_play import LATEST, Ledger, _count, elo_change, game_result, interleaved
from tests.helpers import (
    ROOT,
    needs_xvfb,
    progress_rows,
    rollout_here,
    run_train,
    start_train,
    trial_dirs,
    wait_for_rows,
)

CYCLES = "configs/cycles-selfplay.yaml"
SP = "self_play/cycle/"

# ---- the rules, without Ray ---------------------------------------------------------------------------


def test_elo_follows_the_standard_formula():
    assert elo_change(1200, 1200, 1.0) == pytest.approx(8.0)  # K=16, expected 0.5
    assert elo_change(1200, 1200, 0.5) == pytest.approx(0.0)
    expected = 1 / (1 + 10 ** ((1400 - 1200) / 400))  # 0.24
    assert elo_change(1200, 1400, 0.0) == pytest.approx(-16 * expected)
    assert [game_result(r) for r in (2.0, 0.0, -0.1)] == [1.0, 0.5, 0.0]
    order = interleaved(3, 1, 2)
    assert sorted(order) == [0.0, 0.0, 0.5, 1.0, 1.0, 1.0] and order[0] != order[1]


def test_an_iteration_without_a_game_counts_zero():
    # RLlib reports a summed metric that got no value in this iteration as NaN (seen on Dodgeball).
    assert [_count(v) for v in (None, math.nan, 3.0, 4)] == [0, 0, 3, 4]


def test_ledger_snapshots_swaps_and_changes_teams_at_their_step_counts():
    settings = SelfPlaySettings(save_steps=100, team_change=250, swap_steps=60, window=3)
    ledger = Ledger.new(settings, {"p": [1, 0]})
    assert ledger.learning_team == 0 and ledger.policies["p"].pool == [{"id": 0, "elo": 1200.0}]
    rng = np.random.default_rng(0)
    events = [ledger.advance(settings, {"p": (40, 30)}, rng) for _ in range(10)]
    snapshots = [i for i, (snap, _) in enumerate(events) if snap]
    swaps = [i for i, (_, swap) in enumerate(events) if swap]
    assert snapshots == [2, 5, 8]  # learning steps 120, 240, 360: each >= 100 past the last
    assert ledger.policies["p"].snapshots_taken == 4
    assert [int(s["id"]) for s in ledger.policies["p"].pool] == [1, 2, 3]  # window 3
    assert ledger.team_changes == 1 and ledger.learning_team == 1  # at 280 learning steps (index 6)
    assert swaps == [1, 3, 5, 6, 8]  # opponent steps 60, 120, 180, the team change (210), then 270
    again = Ledger.from_json(ledger.to_json())
    assert again == ledger


def test_play_moves_the_learner_and_the_snapshot_in_opposite_directions():
    settings = SelfPlaySettings()
    ledger = Ledger.new(settings, {"p": [0, 1]})
    ledger.play("p", interleaved(10, 0, 0))
    rec = ledger.policies["p"]
    assert rec.elo > 1200 and rec.pool[0]["elo"] == pytest.approx(2400 - rec.elo)
    assert rec.wins == 10 and rec.opponent_elo == rec.pool[0]["elo"]
    rec.opponent = LATEST
    before = rec.elo
    ledger.play("p", [1.0])
    assert rec.elo == pytest.approx(before + 8.0)  # against the latest weights: rated as itself


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"save_step": 10}, "unknown self_play setting 'save_step'"),
        ({"window": 0}, "window must be a positive integer"),
        ({"play_against_latest_model_ratio": 1.5}, "a number from 0 to 1"),
        ({"teams": {"a": 0, "b": 0}}, "at least two teams"),
        ("yes", "must be a mapping"),
    ],
)
def test_bad_settings_name_the_setting(value, message):
    with pytest.raises(UserError, match=re.escape(message)):
        SelfPlaySettings.parse(value, "x.yaml:3")


def test_defaults_are_ml_agents_and_teams_take_globs():
    s = SelfPlaySettings.parse(True, "x")
    assert (s.save_steps, s.team_change_steps, s.swap_steps, s.window) == (20000, 100000, 2000, 10)
    assert (s.play_against_latest_model_ratio, s.initial_elo) == (0.5, 1200.0)
    teams = TeamsByName({"red_0": 1, "red_*": 1, "blue_*": 0})
    assert [teams(a) for a in ("red_0", "red_7", "blue_2")] == [1, 1, 0]
    with pytest.raises(UserError, match="matches no entry"):
        teams("green_1")


# ---- asymmetric games: a policy per team, each with its own settings --------------------------------

ASYMMETRIC = {
    "save_steps": 10_000,
    "policies": {
        "Striker": {"team_change": 240, "swap_steps": 100},
        "Goalie": {"team_change": 120, "swap_steps": 60},
    },
}


def _turn(ledger: Ledger) -> dict[str, tuple[int, int]]:
    """An iteration's (learning, opponent) steps: two strikers take 120 steps, one goalie 60."""
    if ledger.learning_team == 0:
        return {"Striker": (120, 0), "Goalie": (0, 60)}
    return {"Striker": (0, 120), "Goalie": (60, 0)}


def test_each_team_learns_for_its_own_policys_team_change_and_swaps_its_own_opponent():
    # ML-Agents' controller: the learning team changes once the learning behavior's trainer has taken
    # its own team_change steps since it last changed it; a trainer counts only while it learns.  A
    # trainer swaps its frozen team's snapshot every swap_steps of that team, and at a team change.
    settings = SelfPlaySettings.parse(ASYMMETRIC, "x")
    ledger = Ledger.new(settings, {"Striker": [0], "Goalie": [1]})
    assert ledger.learning_team == 0
    rng = np.random.default_rng(0)
    teams, swapped = [], []
    for _ in range(6):
        swapped.append(sorted(ledger.advance(settings, _turn(ledger), rng)[1]))
        teams.append(ledger.learning_team)
    # Striker learns 240 of its steps (2 iterations), then Goalie 120 of its own (2), and again.
    assert teams == [0, 1, 1, 0, 0, 1]
    assert ledger.team_changes == 3
    assert (ledger.policies["Striker"].steps, ledger.policies["Goalie"].steps) == (480, 120)
    # Goalie's snapshot every 60 of its frozen steps; at a change the team that stops learning gets a
    # new opponent and the one that starts keeps its own (its frozen module rests).
    assert swapped == [["Goalie"], ["Striker"], ["Striker"], ["Goalie"], ["Goalie"], ["Striker"]]
    assert Ledger.from_json(ledger.to_json()) == ledger


def test_asymmetric_elo_moves_the_other_policys_snapshot_or_its_rating():
    ledger = Ledger.new(SelfPlaySettings(), {"Striker": [0], "Goalie": [1]})
    striker, goalie = ledger.policies["Striker"], ledger.policies["Goalie"]
    assert ledger.rated_against("Striker") == "Goalie"
    ledger.play("Striker", [1.0])  # against Goalie's snapshot 0
    assert striker.elo == pytest.approx(1208.0) and goalie.pool[0]["elo"] == pytest.approx(1192.0)
    assert goalie.elo == 1200.0 and striker.wins == 1 and goalie.wins == 0
    goalie.opponent = LATEST  # Goalie's current weights: its own rating moves (ML-Agents' policy_elos[-1])
    ledger.play("Striker", [0.0])
    assert goalie.elo > 1200.0 and striker.elo + goalie.elo == pytest.approx(2400.0 + 8.0)
    assert goalie.opponent_elo == goalie.elo


def test_a_mixture_rates_each_learner_and_shares_team_change_within_a_team():
    both_ways = {"A": [0, 1], "B": [0], "C": [1]}  # A plays for both teams, B and C for one each
    ledger = Ledger.new(SelfPlaySettings(), both_ways)
    assert [p for p in ("A", "B", "C") if ledger.learns(p)] == ["A", "B"]
    assert [p for p in ("A", "B", "C") if ledger.opposes(p)] == ["A", "C"]
    assert (ledger.rated_against("A"), ledger.rated_against("B")) == ("A", "A")
    clash = SelfPlaySettings.parse({"team_change": 500, "policies": {"B": {"team_change": 900}}}, "x.yaml:4")
    with pytest.raises(UserError, match=re.escape("policies 'A' (500) and 'B' (900) both play for team 0")):
        clash.check_team_change(both_ways, "x.yaml:4")
    SelfPlaySettings.parse({"policies": {"C": {"team_change": 900}}}, "x").check_team_change(
        {"B": [0], "C": [1]}, "x"
    )  # an asymmetric game: each team its own


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"policies": {"Goalie": {"swap_step": 5}}}, "unknown self_play policies.Goalie setting 'swap_step'"),
        (
            {"policies": {"Goalie": {"window": 0}}},
            "self_play policies.Goalie window must be a positive integer",
        ),
        ({"policies": {"Goalie": {"teams": {"a": 1}}}}, "teams is a setting of the whole run"),
        ({"policies": {"Goalie": 3}}, "self_play policies.Goalie must be a mapping"),
        ({"policies": ["Goalie"]}, "self_play policies must be a mapping"),
    ],
)
def test_bad_policy_settings_name_the_policy_and_the_setting(value, message):
    with pytest.raises(UserError, match=re.escape(message)):
        SelfPlaySettings.parse(value, "x.yaml:3")


def test_a_policys_settings_override_the_defaults_and_name_a_trained_policy():
    settings = SelfPlaySettings.parse(ASYMMETRIC, "x")
    goalie = settings.of("Goalie")
    assert (goalie.save_steps, goalie.swap_steps, goalie.team_change_steps) == (10_000, 60, 120)
    assert settings.of("Referee").swap_steps == 2000 and settings.of("Referee").team_change_steps == 50_000
    with pytest.raises(UserError, match="'Goalee' is no policy") as refused:
        SelfPlaySettings.parse({"policies": {"Goalee": {}}}, "x").check_policy_ids(["Goalie", "Striker"], "x")
    assert refused.value.hint == "did you mean 'Goalie'?"


# ---- through train.py ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "override", "message"),
    [
        (CYCLES, "--config.self_play.swap_step=5", "unknown self_play setting 'swap_step'"),
        ("configs/cartpole-ppo.yaml", "--config.self_play=true", "self_play needs a multi-agent env"),
        (CYCLES, "--config.self_play.teams={player_0: 0, player_9: 1}", "'player_1' matches no entry"),
        (CYCLES, "--config.self_play.teams={'player_*': 0, nobody: 1}", "self-play needs two teams"),
        (CYCLES, "--config.self_play.policies={cycel: {window: 3}}", "did you mean 'cycle'?"),
    ],
)
def test_self_play_mistakes_exit_2_before_training(tmp_path, config, override, message):
    out = run_train(["-f", config, override, "--local-dir", str(tmp_path)], timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert message in out.stderr and "Traceback" not in out.stderr
    assert not trial_dirs(tmp_path)


def _rollout(checkpoint: Path, *args: str) -> subprocess.CompletedProcess:
    """rollout.py's own code in this process, its exit status and output captured as a subprocess's
    (each subprocess paid Python's, torch's and RLlib's start: ~3 s a call here)."""
    return rollout_here(checkpoint, "--no-out", *args)


@pytest.mark.slow
def test_cycles_elo_rises_and_the_policy_beats_random_play(train, tmp_path):
    # 24 iterations of 2,000 steps: about a minute here.
    out = train("-f", CYCLES, "--stop-iters", "24", "--seed", "0", timeout=570)
    assert out.returncode == 0
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    elo = [float(r[SP + "elo"]) for r in rows]
    assert float(rows[0][SP + "elo"]) < 1300
    # Stated: the learning policy's rating ends at least 100 above initial_elo (1200); runs here end
    # near 1,400-1,600 after 48k steps, as it beats its older snapshots.
    assert max(elo[-6:]) >= 1300, elo
    assert "elo cycle" in out.stdout  # on the progress line
    assert (trial / "reward.png").stat().st_size > 10_000  # with its ELO panel
    checkpoint = sorted(trial.glob("checkpoint_*"))[-1]

    vs_random = _rollout(checkpoint, "--episodes", "100", "--opponent", "random", "--seed", "1")
    assert vs_random.returncode == 0, vs_random.stderr[-3000:]
    found = re.search(
        r"cycle against random: (\d+) wins, (\d+) draws, (\d+) losses in 100 games", vs_random.stdout
    )
    assert found, vs_random.stdout[-2000:]
    # Stated: the trained policy wins at least 80 of 100 games against uniform random play
    # (a policy that only avoids walls wins ~93%; random against random wins ~44%).
    assert int(found.group(1)) >= 80, found.group(0)

    onnx = _rollout(checkpoint, "--export-onnx", str(tmp_path / "cycle.onnx"))
    assert onnx.returncode == 0 and "(policy cycle;" in onnx.stdout  # the trained policy only
    assert "@opponent" not in onnx.stdout and "@self_play" not in onnx.stdout
    bad = _rollout(checkpoint, "--episodes", "1", "--opponent", "snapshot:9999")
    assert bad.returncode == 2 and "--opponent: no snapshot 9999: policy" in bad.stderr, bad.stderr[-2000:]
    assert "keeps snapshots" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.slow
def test_sigterm_then_resume_continues_the_pool_and_the_ratings(ray_address, tmp_path):
    args = [
        "-f", CYCLES, "--stop-iters", "8", "--ray-address", ray_address, "--local-dir", str(tmp_path),
        "--config.train_batch_size=1000", "--config.self_play.save_steps=600",
        "--config.self_play.swap_steps=400",
    ]  # fmt: skip
    proc = start_train(args)
    try:
        wait_for_rows(tmp_path, proc, 3, timeout=240)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-3000:]
    (trial,) = trial_dirs(tmp_path)
    stopped = progress_rows(trial)
    resumed = run_train([*args, "--resume"], timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = progress_rows(trial)
    assert [int(r["training_iteration"]) for r in rows] == list(range(1, 9))
    last, first_new = stopped[-1], rows[len(stopped)]
    # Each row reports the ledger its games were played in: the row after the stop starts from the
    # ledger the stop's checkpoint saved, i.e. the last row's counters plus that iteration's steps.
    learning = float(last["env_runners/num_module_steps_sampled/cycle"])
    assert float(first_new[SP + "learning_steps"]) == float(last[SP + "learning_steps"]) + learning
    assert float(first_new[SP + "snapshots_taken"]) >= float(last[SP + "snapshots_taken"]) >= 2
    assert float(first_new[SP + "elo"]) != 1200.0
    assert not math.isnan(float(first_new[SP + "elo"]))


# ---- Unity: the stand-in Dodgeball, one remote env runner ----------------------------------------------


def _module_state(checkpoint: Path, module: str) -> dict:
    from ray.rllib.core.rl_module.rl_module import RLModule

    return RLModule.from_checkpoint(checkpoint / internals.MODULE_DIR / module).get_state()


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a)


@pytest.mark.slow
@needs_xvfb
def test_dodgeball_snapshots_swaps_team_changes_and_a_frozen_opponent(train, tmp_path):
    # Half the config's batch (500 env steps, about 800 of the learning team's agent steps an
    # iteration) and step counts scaled to it: 6 iterations still see at least two snapshots, one
    # team change and two swaps, in half the game's time (the events are re-derived below from the
    # steps each row reports, whatever they were).
    settings = {"save_steps": 1500, "swap_steps": 1000, "team_change": 3000, "window": 3}
    out = train(
        "-f", "configs/unity-dodgeball-selfplay.yaml", "--stop-iters", "6", "--checkpoint-freq", "1",
        "--keep-checkpoints-num", "10", "--config.train_batch_size=500", "--config.minibatch_size=125",
        f"--config.env_config.log_folder={tmp_path / 'logs'}", f"--config.self_play={json.dumps(settings)}",
        timeout=570,
    )  # fmt: skip
    assert out.returncode == 0
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    assert len(rows) == 6
    # The events, re-derived from each iteration's agent steps as ML-Agents counts them.
    learning = last_save = last_change = 0
    snapshots, team = 1, 0
    for i, row in enumerate(rows):
        assert int(float(row["self_play/Dodgeball/snapshots_taken"])) == snapshots, i
        assert int(float(row["self_play/learning_team"])) == team, i
        assert int(float(row["self_play/Dodgeball/learning_steps"])) == learning, i
        learning += int(float(row["env_runners/num_module_steps_sampled/Dodgeball"]))
        if learning - last_save >= settings["save_steps"]:
            snapshots, last_save = snapshots + 1, learning
        if learning - last_change >= settings["team_change"]:
            team, last_change = 1 - team, learning
    assert snapshots >= 3 and team == 1  # at least two snapshots and one team change happened

    # Each checkpoint's ledger, and the frozen side's weights across iterations.
    from ray.rllib.core.rl_module.rl_module import RLModule

    checkpoints = sorted(trial.glob("checkpoint_*"))
    assert len(checkpoints) == 6
    ledgers, unchanged = [], 0
    for before, after in itertools.pairwise(checkpoints):
        a = RLModule.from_checkpoint(before / "learner_group/learner/rl_module/@self_play")
        b = RLModule.from_checkpoint(after / "learner_group/learner/rl_module/@self_play")
        la, lb = json.loads(a.ledger), json.loads(b.ledger)
        ledgers.append(lb)
        frozen_same = _same(
            _module_state(before, "Dodgeball@opponent"), _module_state(after, "Dodgeball@opponent")
        )
        learner_same = _same(_module_state(before, "Dodgeball"), _module_state(after, "Dodgeball"))
        assert not learner_same  # the learning module trained
        if la["swaps"] == lb["swaps"]:
            assert frozen_same, f"{before.name} -> {after.name}: the frozen opponent changed without a swap"
            unchanged += 1
        opponent = lb["policies"]["Dodgeball"]["opponent"]
        if opponent != LATEST:  # the opponent's weights are that snapshot's, byte for byte
            assert _same(_module_state(after, "Dodgeball@opponent"), b.pool["Dodgeball"][str(opponent)])
        assert len(b.pool["Dodgeball"]) == len(lb["policies"]["Dodgeball"]["pool"]) <= 3  # window
    assert unchanged >= 1, "no iteration without a swap: the frozen check compared nothing"
    assert ledgers[-1]["swaps"] >= 2

    # As mlagents-learn does: one brain for the behavior, which both teams run.
    brains = rollout_here(str(checkpoints[-1]), "--export-unity", str(tmp_path / "brains"))
    assert brains.returncode == 0, brains.stderr[-3000:]
    doc = json.loads((tmp_path / "brains" / "brains.json").read_text())
    files = {b: (e["file"], e["policy"]) for b, e in doc["behaviors"].items()}
    assert files == {f"Dodgeball?team={t}": ("Dodgeball.onnx", "Dodgeball") for t in (0, 1)}


# ---- Unity: the stand-in StrikersVsGoalie, an asymmetric game ------------------------------------------


def _module_steps(row: dict, module: str) -> float:
    """A module's agent steps in a progress row: empty (or NaN) where it took none that iteration."""
    value = float(row.get(f"env_runners/num_module_steps_sampled/{module}") or 0.0)
    return 0.0 if math.isnan(value) else value


@pytest.mark.slow
def test_strikers_and_goalie_take_turns_each_against_its_own_snapshots(train, tmp_path):
    team_change = {"Striker": 300, "Goalie": 100}  # each team learns for its own policy's count
    experiment = {
        "run": "PPO",
        "env": "unity",
        "stop": {"training_iteration": 3},
        "config": {
            "env_config": {
                "file_name": "builds/StrikersVsGoalie",
                "no_graphics": True,
                "policy_mapping": {"Striker": "Striker", "Goalie": "Goalie"},
            },
            "self_play": {
                "save_steps": 300,
                "swap_steps": 100,
                "policies": {p: {"team_change": n} for p, n in team_change.items()},
            },
            "model": {"fcnet_hiddens": [32]},
            "num_env_runners": 0,
            "train_batch_size": 200,
            "minibatch_size": 100,
            "num_epochs": 1,
        },
    }
    (tmp_path / "svg.yaml").write_text(json.dumps({"strikers-vs-goalie": experiment}))
    out = train("-f", str(tmp_path / "svg.yaml"), "--checkpoint-at-end", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "elo Goalie" in out.stdout and "elo Striker" in out.stdout  # the progress line
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    assert len(rows) == 3
    playing = {0: "Striker", 1: "Goalie"}  # the policy of each team
    learned, last_change, team, teams = 0.0, 0.0, 0, []
    for i, row in enumerate(rows):
        assert int(float(row["self_play/learning_team"])) == team, i
        teams.append(team)
        learner, frozen = playing[team], playing[1 - team]
        # The learning team acts with its policy, the other with a snapshot of its own policy; after a
        # team change, games begun before it finish as they began.
        assert _module_steps(row, learner) > 0 and _module_steps(row, f"{frozen}@opponent") > 0, i
        if i == 0:
            assert _module_steps(row, frozen) == 0 and _module_steps(row, f"{learner}@opponent") == 0
        for policy in playing.values():
            assert not math.isnan(float(row[f"self_play/{policy}/elo"])), i
        learned += _module_steps(row, learner)
        if learned - last_change >= team_change[learner]:
            team, last_change = 1 - team, learned
    assert teams[:2] == [0, 1], teams  # Striker's 300 steps pass in the first iteration

    from ray.rllib.core.rl_module.rl_module import RLModule

    (checkpoint,) = trial.glob("checkpoint_*")
    modules = checkpoint / internals.MODULE_DIR
    assert {"Striker", "Striker@opponent", "Goalie", "Goalie@opponent"} <= {p.name for p in modules.iterdir()}
    ledger = json.loads(RLModule.from_checkpoint(modules / "@self_play").ledger)
    assert ledger["policy_teams"] == {"Goalie": [1], "Striker": [0]}
    assert ledger["team_changes"] >= 2 and ledger["learning_team"] == team


@pytest.mark.slow
def test_ml_agents_strikers_vs_goalie_config_trains(train, tmp_path, standin_builds):
    # mlagents-learn's own file, its behaviors' self_play blocks made equal (the translation writes one
    # block; per-behavior differences are self_play.policies).
    text = (ROOT / "tests/data/mlagents_configs/StrikersVsGoalie.ppo.yaml").read_text()
    (tmp_path / "svg.yaml").write_text(text.replace("swap_steps: 4000", "swap_steps: 1000"))
    out = train(
        str(tmp_path / "svg.yaml"), "--env", str(standin_builds / "StrikersVsGoalie"), "--no-graphics",
        "--stop-iters", "2", "--config.min_sample_timesteps_per_iteration=0",
        "--config.train_batch_size=2048", "--config.minibatch_size=512", timeout=500,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    (trial,) = trial_dirs(train.results)
    rows = progress_rows(trial)
    assert len(rows) == 2
    assert all(f"self_play/{p}/elo" in rows[-1] for p in ("Striker", "Goalie"))
    assert _module_steps(rows[0], "Striker") > 0 and _module_steps(rows[0], "Goalie@opponent") > 0
