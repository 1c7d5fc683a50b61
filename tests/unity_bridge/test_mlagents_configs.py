"""ML-Agents' own example trainer configs (tests/data/mlagents_configs), run unchanged with
``train.py FILE --env STANDIN`` on the stand-in player's example games: each trains, writes a
checkpoint, rolls out and exports its brains; 3DBall's normalised brain plays in the stand-in's brain
runner with rollout.py's return; WallJump's curriculum advances in order, reaches the game, and resumes
in its lesson."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, rollout_here

CONFIGS = ROOT / "tests" / "data" / "mlagents_configs"
pytestmark = pytest.mark.slow

# Each config with the stand-in build of its game (helper games named and shaped as ML-Agents' examples).
RUNS = {
    "3DBall.sac.yaml": "3DBall",
    "3DBallHard.ppo.yaml": "3DBallHard",
    "GridWorld.ppo.yaml": "GridWorld",
    "PushBlock.ppo.yaml": "PushBlock",
    "WallJump.ppo.yaml": "WallJump",
    "StrikersVsGoalie.ppo.yaml": "StrikersVsGoalie",  # asymmetric self-play, each behavior's own swap_steps
    # trainer_type poca: cooperative groups (run: POCA), SoccerTwos with self-play between its teams
    "PushBlockCollab.poca.yaml": "PushBlockCollab",
    "DungeonEscape.poca.yaml": "DungeonEscape",
    "SoccerTwos.poca.yaml": "SoccerTwos",
}
_SMALL_BUFFER = ["--config.train_batch_size=2048", "--config.minibatch_size=512"]
SMALLER = {  # a buffer of 10,240 or 20,480 agent steps takes half a minute here: a smaller one, the same file
    "StrikersVsGoalie.ppo.yaml": _SMALL_BUFFER,
    "PushBlockCollab.poca.yaml": _SMALL_BUFFER,
    "DungeonEscape.poca.yaml": _SMALL_BUFFER,
    "SoccerTwos.poca.yaml": [*_SMALL_BUFFER, "--config.time_horizon=64"],
}
SHORT = ["--no-graphics", "--config.min_sample_timesteps_per_iteration=0"]  # an iteration: one buffer


def train(
    config: str, build: Path, out: Path, *extra: str, timeout: int = 240
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "train.py", str(CONFIGS / config), "--env", str(build), "--results-dir", str(out),
         *SHORT, *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def rollout(checkpoint: Path, *extra: str) -> subprocess.CompletedProcess:
    """rollout.py's code in this process: a process of its own paid Python's and RLlib's start again."""
    return rollout_here(checkpoint, "--no-out", *extra)


def rows(out: Path) -> list[dict[str, str]]:
    (progress,) = out.glob("ppo/*/progress.csv")
    return list(csv.DictReader(progress.open()))


def checkpoint(out: Path) -> Path:
    return sorted(out.glob("ppo/*/checkpoint_*"))[-1]


def mean_return(text: str, label: str = "return") -> float:
    return float(re.search(rf"{label} mean (-?[\d.]+)", text).group(1))


@pytest.mark.parametrize("config", list(RUNS))
def test_an_example_config_trains_checkpoints_rolls_out_and_exports_brains(config, standin_builds, tmp_path):
    out = tmp_path / "results"
    trained = train(config, standin_builds / RUNS[config], out, "--stop-iters", "1", *SMALLER.get(config, []))
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "per agent" in trained.stdout  # mlagents-learn's mean reward beside RLlib's sum
    played = rollout(checkpoint(out), "--episodes", "1", "--export-unity", str(tmp_path / "brains"))
    assert played.returncode == 0, played.stderr[-3000:]
    brains = json.loads((tmp_path / "brains" / "brains.json").read_text())["behaviors"]
    game = yaml.safe_load((CONFIGS / config).read_text())["behaviors"]
    assert {re.sub(r"\?team=\d+$", "", b) for b in brains} == set(game)
    assert all((tmp_path / "brains" / b["file"]).is_file() for b in brains.values())


def test_3dball_with_normalize_trains_and_its_brain_plays_with_rollouts_return(standin_builds, tmp_path):
    """3DBall.yaml unchanged (normalize: true, 12 agents in one scene): statistics per behavior, saved
    with the checkpoint and inside the exported brain, which plays as rollout.py does."""
    out = tmp_path / "results"
    # One iteration (one buffer of 12,000 agent steps, 3 epochs of minibatches of 64: most of this
    # test's time) is all the checks below need: statistics gathered, saved with the checkpoint and
    # baked into the brain, which must then play as rollout.py plays the same checkpoint.
    trained = train("3DBall.ppo.yaml", standin_builds / "3DBall", out, "--stop-iters", "1")
    assert trained.returncode == 0, trained.stderr[-3000:]
    table = rows(out)
    assert all(int(float(r["env_runners/num_agent_steps_sampled"])) >= 12000 for r in table)  # buffer_size
    # The mean per agent: each episode one agent's life with the agents-batched loop (its filter
    # normalising each frame), a round of the game summing its agents with RLlib's loop.
    batched = "notice: agents-batched: each policy acts" in trained.stderr
    for r in table:
        per_agent, per_episode = (
            float(r["env_runners/agent_return_mean"]),
            float(r["env_runners/episode_return_mean"]),
        )
        assert per_agent == pytest.approx(per_episode) if batched else per_agent < per_episode
    ckpt = checkpoint(out)
    exported = rollout(ckpt, "--episodes", "1", "--export-unity", str(tmp_path / "brains"))
    assert exported.returncode == 0, exported.stderr[-3000:]
    from ray.rllib.core.rl_module.rl_module import RLModule

    from envsdk.evaluation.restore import load
    from envsdk.training.hooks.observation_filter import saved_statistics
    from envsdk.training.run.checkpoints import locate

    restored = load(locate(ckpt).checkpoint)
    module = RLModule.from_checkpoint(restored.module_dir / "3DBall")
    stats = saved_statistics(restored, module, "3DBall")
    assert stats is not None and list(stats.stats) == [()]  # the behavior's statistics, in the brain's graph
    mean, std = stats.stats[()]
    assert mean.shape == (8,) and (std > 0).sum() >= 4  # trained (some of the game's features are constant)
    one_agent = ["--env-config", '{"additional_args": ["--agents", "1"]}', "--episodes", "30"]
    trainer = mean_return(rollout(ckpt, *one_agent).stdout)
    played = subprocess.run(
        [str(standin_builds / "3DBall.x86_64"), "-nographics", "--agents", "1", "--brain",
         str(tmp_path / "brains"), "--episodes", "30"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert played.returncode == 0, played.stdout + played.stderr[-2000:]
    brain = mean_return(played.stdout, "agent return")
    # Same policy, other starts: 30 episodes each, std about 1.1 (a mean's standard error 0.2).
    assert abs(brain - trainer) < 0.8, (brain, trainer)


def test_walljump_curriculum_advances_reaches_the_game_and_resumes_in_its_lesson(standin_builds, tmp_path):
    """WallJump_curriculum.yaml unchanged but for a smaller max_steps (its lessons end at 10%, 30% and
    50% of it, each once 100 of the behavior's agent-episodes ended since the last change: about two
    iterations for SmallWallJump, more for BigWallJump's longer episodes): the lessons advance in
    order, the game logs each lesson's values (a sampler's draws in its range), and a resumed run
    continues in the lesson it stopped in."""
    out, logs = tmp_path / "results", tmp_path / "logs"
    steps = "--config.policy_max_steps={BigWallJump: 6000, SmallWallJump: 6000}"
    first = train(
        "WallJump_curriculum.ppo.yaml", standin_builds / "WallJump", out, steps,
        f"--config.env_config.log_folder={logs / 'first'}", "--stop-iters", "3",
    )  # fmt: skip
    assert first.returncode == 0, first.stderr[-3000:]
    stopped_in = [int(r["curriculum/small_wall_height/lesson"]) for r in rows(out)][-1]
    assert stopped_in >= 1
    resumed = train(
        "WallJump_curriculum.ppo.yaml", standin_builds / "WallJump", out, steps,
        f"--config.env_config.log_folder={logs / 'resumed'}", "--stop-iters", "6", "--resume",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    table = rows(out)
    big = [int(r["curriculum/big_wall_height/lesson"]) for r in table]
    small = [int(r["curriculum/small_wall_height/lesson"]) for r in table]
    assert big == sorted(big) and small == sorted(small), (big, small)  # in order
    assert small[3] >= stopped_in and small[-1] >= 2, small  # resumed in its lesson, and on from there
    values = [float(r["curriculum/small_wall_height/value"]) for r in table]
    lesson_values = {0: 1.5, 1: 2.0, 2: 2.5, 3: 4.0}  # each lesson's value in the file
    assert values == [lesson_values[lesson] for lesson in small], (values, small)
    log = "\n".join(p.read_text() for p in sorted(logs.glob("*/*.log")))
    for low, high in ((0.0, 4.0),):  # Lesson0's sampler, drawn per episode
        drawn = [
            float(v)
            for v in re.findall(rf"big_wall_height drawn (-?[\d.]+) \(uniform {low:g}\.\.{high:g}\)", log)
        ]
        assert len(drawn) >= 5 and all(low <= v <= high for v in drawn), (low, high, drawn[:5])
    assert "small_wall_height = 2" in log and "small_wall_height = 2.5" in log


def test_behaviors_the_game_lacks_are_left_out_with_a_notice_as_mlagents_learn_ignores_them(
    standin_builds, tmp_path
):
    """One file for several games (as ML-Agents' old trainer_config.yaml): the game's behaviors train and
    stop at their max_steps; the others are named once and left out."""
    config = tmp_path / "trainer.yaml"
    behavior = "{trainer_type: ppo, hyperparameters: {batch_size: 50, buffer_size: 200}, max_steps: 400"
    behavior += ", summary_freq: 200}"
    config.write_text(f"behaviors:\n  Chase: {behavior}\n  Runner: {behavior}\n")
    out = tmp_path / "results"
    trained = subprocess.run(
        [sys.executable, "train.py", str(config), "--env", str(standin_builds / "Chase"), "--no-graphics",
         "--results-dir", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "policy_max_steps: Runner: no such policy in this run" in trained.stderr
    steps = [int(float(r["env_runners/num_module_steps_sampled_lifetime/Chase"])) for r in rows(out)]
    assert steps[-1] >= 400 and (len(steps) == 1 or steps[-2] < 400)


def test_3dball_randomize_sends_samplers_and_the_game_draws_each_episode(standin_builds, tmp_path):
    """ML-Agents' 3DBall_randomize (its pre-1.0 copy: parameter_randomization): mass, gravity and scale
    reach the game as samplers, never as plain floats, and the game's draws spread over each range."""
    logs = tmp_path / "logs"
    trained = train(
        "3DBall_randomize.ppo.pre1.yaml", standin_builds / "3DBall", tmp_path / "results",
        f"--config.env_config.log_folder={logs}", "--stop-iters", "1",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    log = "\n".join(p.read_text() for p in logs.glob("*.log"))
    for name, low, high in (("mass", 0.5, 10.0), ("gravity", 7.0, 12.0), ("scale", 0.75, 3.0)):
        assert not re.search(rf"environment parameter {name} = ", log), name  # no plain float
        drawn = [float(v) for v in re.findall(rf"{name} drawn (-?[\d.]+) \(uniform", log)]
        assert len(drawn) >= 20 and all(low <= v <= high for v in drawn), (name, drawn[:5])
        third = (high - low) / 3
        assert min(drawn) < low + third and max(drawn) > high - third, (name, min(drawn), max(drawn))


@pytest.mark.parametrize("config", ["Pyramids.imitation.yaml", "PyramidsRND.ppo.yaml"])
def test_pyramids_signals_and_cloning_train_unchanged_from_a_demo_we_recorded(
    config, standin_builds, tmp_path
):
    """ML-Agents' imitation and RND files for Pyramids, unchanged, beside the demonstration their
    demo_path names (recorded by rollout.py from a scripted player of the stand-in's Pyramids): each
    trains with every signal's reward and loss, and cloning's, as progress.csv columns."""
    demo = tmp_path / "Project/Assets/ML-Agents/Examples/Pyramids/Demos/ExpertPyramid.demo"
    demo.parent.mkdir(parents=True)
    build = standin_builds / "Pyramids"
    recorded = subprocess.run(
        [sys.executable, str(ROOT / "rollout.py"), "--env", "unity", "--env-config",
         json.dumps({"file_name": str(build), "no_graphics": True}), "--episodes", "4",
         "--policy", f"{ROOT / 'tests/data/demos/pyramids_expert.py'}:play", "--out", str(demo)],
        cwd=tmp_path, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert recorded.returncode == 0 and demo.is_file(), recorded.stderr[-3000:]
    assert "return mean 1.99" in recorded.stdout  # the scripted player finds the brick every time
    out = tmp_path / "results"
    trained = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), str(CONFIGS / config), "--env", str(build),
         "--results-dir", str(out), *SHORT, "--stop-iters", "1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    (row,) = rows(out)
    signals = yaml.safe_load((CONFIGS / config).read_text())["behaviors"]["Pyramids"]["reward_signals"]
    prefix = "learners/Pyramids/reward_signals"
    for name in signals:
        assert float(row[f"{prefix}/{name}/reward_mean"]) == float(row[f"{prefix}/{name}/reward_mean"])
    if config.startswith("Pyramids.imitation"):
        assert float(row[f"{prefix}/gail/loss"]) > 0
        assert float(row["learners/Pyramids/behavioral_cloning/loss"]) > 0
    else:
        assert float(row[f"{prefix}/rnd/loss"]) > 0
