"""Brains with memory in the stand-in's brain runner: ML-Agents' own Hallway.ppo.yaml (``memory:``) run
unchanged on the stand-in Hallway (a camera + vector, masked goals, a cue shown only in the episode's
first observation), its brain exported with train.py's end-of-run export, played by the stand-in player
with each agent's memory carried, with the return rollout.py shows on the same checkpoint; and the same
file learns the cue with its memory and cannot without it (``--config.model.use_lstm=false``)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT
from tests.unity_bridge.test_mlagents_configs import checkpoint, mean_return, rollout, train

pytestmark = pytest.mark.slow
SMALL = ["--stop-iters", "4", "--config.train_batch_size=512", "--config.minibatch_size=128"]
AGENTS = ["--env-args", "--agents", "8"]  # mlagents-learn's own flag: the game's arguments, last


def test_hallway_brain_with_memory_plays_with_rollouts_return(standin_builds, tmp_path):
    out = tmp_path / "results"
    trained = train("Hallway.ppo.yaml", standin_builds / "Hallway", out, *SMALL, *AGENTS)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "LSTM 64" in trained.stdout  # memory_size 128: an LSTM of 64 cells, h and c
    ckpt = checkpoint(out)
    brains = tmp_path / "brains"
    exported = rollout(ckpt, "--episodes", "1", "--export-unity", str(brains))
    assert exported.returncode == 0, exported.stderr[-3000:]
    (entry,) = json.loads((brains / "brains.json").read_text())["behaviors"].values()
    assert entry["memory_size"] == 128
    one_agent = ["--env-config", '{"additional_args": ["--agents", "1"]}', "--episodes", "20"]
    trainer = mean_return(rollout(ckpt, *one_agent).stdout)
    played = subprocess.run(
        [sys.executable, "-m", "unity_bridge.standin.player", "--game", "hallway", "--visual", "16",
         "-nographics", "--agents", "1", "--brain", str(brains), "--episodes", "20"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert played.returncode == 0, played.stdout + played.stderr[-2000:]
    brain = mean_return(played.stdout, "agent return")
    # Same greedy policy, other cues: 20 episodes of +1 or -0.1 (std at most 0.55, a mean's error 0.12).
    assert abs(brain - trainer) < 0.3, (brain, trainer)


# A policy without memory sees the same last observation whichever goal pays: its best is a guess, a
# return of 0.45 (+1 or -0.1); the mean of the last 100 episodes has a std of 0.055 around it.
GUESS_CEILING = 0.65  # 0.45 + 3.6 std
LEARNT = 0.8  # measured after 8 iterations: 0.93-0.96 with memory (seeds 1-7), 0.41-0.46 without
# Hallway.ppo.yaml as it is but for a short run: 2,048 agent steps, 8 iterations of 128 two-step
# episodes, at a higher learning rate (each episode is padded to the file's sequence_length of 64).
SHORT_RUN = ["--stop-iters", "8", "--config.train_batch_size=256", "--config.minibatch_size=64",
             "--config.lr=0.003"]  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("memory", [True, False], ids=["memory", "no-memory"])
def test_hallway_cue_is_learnt_with_memory_and_not_without(standin_builds, tmp_path, memory, seed):
    out = tmp_path / "results"
    without = [] if memory else ["--config.model.use_lstm=false"]
    trained = train("Hallway.ppo.yaml", standin_builds / "Hallway", out, *SHORT_RUN, "--seed", str(seed),
                    *without, *AGENTS)  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert ("LSTM 64" in trained.stdout) == memory
    (progress,) = out.glob("ppo/*/progress.csv")
    final = float(list(csv.DictReader(progress.open()))[-1]["env_runners/agent_return_mean"])
    if memory:
        assert final > LEARNT, final
    else:
        assert final < GUESS_CEILING, final
