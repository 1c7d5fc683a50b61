"""Which checkpoint an experiment folder of several trials means: the best trial by the run's score
(said in a notice, with the others' scores), never the one whose folder sorts last; the trial named
with ``--trial``; and several trials that nothing ranks are refused with their names.

The trials are copies of a checkpoint kept in tests/data/checkpoints (written by train.py), each
with the result its manifest records set to what a run of a few iterations would have reached.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from envsdk.errors import UserError
from envsdk.training.run.checkpoints import MANIFEST, locate
from tests.helpers import ROOT

KEPT = ROOT / "tests" / "data" / "checkpoints" / "62e04a5" / "cartpole-ppo"
RETURN = "env_runners/episode_return_mean"
# trial folder -> its checkpoint's return; the 1-iteration re-run's folder sorts last
RERUN = {
    "PPO_CartPole-v1_51fdb_00000_0_2026-11-28_17-52-50": 55.5,  # 5 iterations
    "PPO_CartPole-v1_d7652_00000_0_2026-11-28_17-52-56": 17.9,  # 1 iteration, into the same folder
}


def _experiment(root: Path, returns: dict[str, float | None]) -> Path:
    for trial, value in returns.items():
        checkpoint = root / trial / "checkpoint_000000"
        shutil.copytree(KEPT, checkpoint)
        manifest = json.loads((checkpoint / MANIFEST).read_text())
        manifest["result"][RETURN] = value
        (checkpoint / MANIFEST).write_text(json.dumps(manifest))
    return root


@pytest.mark.parametrize("order", [1, -1], ids=["best-first", "best-last"])
def test_the_best_trial_by_the_return_is_played_and_named(tmp_path, capsys, order):
    returns = dict(zip(RERUN, list(RERUN.values())[::order], strict=True))
    best = max(returns, key=lambda t: returns[t] or 0)
    found = locate(_experiment(tmp_path / "exp", returns))
    assert found.checkpoint == tmp_path / "exp" / best / "checkpoint_000000"
    assert found.why.endswith(f"of the best trial {best} by {RETURN} 55.5")
    (said,) = [line for line in capsys.readouterr().err.splitlines() if "holds 2 trials" in line]
    assert f"the best, {best} ({RETURN} 55.5), is played" in said and f"({RETURN} 17.9)" in said


@pytest.mark.parametrize("name", ["PPO_CartPole-v1_d7652_00000_0_2026-11-28_17-52-56", "d7652"])
def test_a_trial_named_is_played(tmp_path, name):
    found = locate(_experiment(tmp_path / "exp", RERUN), name)
    assert found.checkpoint.parent.name == "PPO_CartPole-v1_d7652_00000_0_2026-11-28_17-52-56"
    assert found.why.endswith("as asked")


@pytest.mark.parametrize(
    ("returns", "trial", "message"),
    [
        (RERUN, "ffff", "no trial with a checkpoint in {exp} named 'ffff'"),
        (RERUN, "PPO", "2 trials in {exp} named 'PPO'"),
        (dict.fromkeys(RERUN), None, "{exp} holds 2 trials and none has a score to rank it by"),
    ],
    ids=["unknown", "ambiguous", "unranked"],
)
def test_what_cannot_be_picked_is_refused_with_the_trials_names(tmp_path, returns, trial, message):
    exp = _experiment(tmp_path / "exp", returns)
    with pytest.raises(UserError) as caught:
        locate(exp, trial)
    assert caught.value.message == message.format(exp=exp)
    assert all(name in caught.value.hint for name in RERUN)


def test_trial_of_a_trial_folder_is_refused(tmp_path):
    exp = _experiment(tmp_path / "exp", RERUN)
    trial = exp / next(iter(RERUN))
    with pytest.raises(UserError, match="is a trial folder, not an experiment folder") as caught:
        locate(trial, "d7652")
    assert caught.value.hint == f"pass the experiment folder, {exp}"


def test_rollout_says_the_trial_flag_in_its_refusal(tmp_path):
    exp = _experiment(tmp_path / "exp", RERUN)
    out = subprocess.run(
        [sys.executable, "rollout.py", str(exp), "--trial", "ffff", "--no-out"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2, out.stderr
    assert out.stderr.splitlines()[-2:] == [
        f"error: --trial: no trial with a checkpoint in {exp} named 'ffff'",
        f"  fix: name one of: {', '.join(RERUN)}",
    ]
