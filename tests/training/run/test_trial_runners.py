"""One trial in train.py's process and the same trial under Tune leave the same trial folder:
file names, progress.csv columns, result keys, params, checkpoint layout and manifest.
rollout.py, --resume, the reward plot and the SLURM launcher read these folders either way."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
import yaml

from tests.helpers import run_train

CONFIG = {"train_batch_size": 256, "minibatch_size": 128, "num_epochs": 1}
TUNE_ONLY = {"params.pkl"}  # Tune pickles the params beside params.json


def _flat(doc: dict, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    for key, value in doc.items():
        keys |= _flat(value, f"{prefix}{key}/") if isinstance(value, dict) else {prefix + key}
    return keys


# CPU and memory use, which Ray's UtilMonitor samples every 0.7 s in either runner: present in a
# result only when its iteration outlasted a sample (on a busy machine, either runner's may).
TIMED = "perf/"


def _folder(trial: Path) -> dict:
    files = {
        re.sub(r"^events\.out\.tfevents\..*", "events.out.tfevents", str(p.relative_to(trial)))
        for p in trial.rglob("*")
        if p.is_file()
    }
    with (trial / "progress.csv").open() as f:
        columns = {c for c in next(csv.reader(f)) if not c.startswith(TIMED)}
    results = [json.loads(line) for line in (trial / "result.json").read_text().splitlines()]
    checkpoint = trial / "checkpoint_000001"
    return {
        "files": files - TUNE_ONLY,
        "columns": columns,
        "result keys": {k for k in _flat(results[-1]) if not k.startswith(("config/", TIMED))},
        "iterations": [r["training_iteration"] for r in results],
        "params": set(json.loads((trial / "params.json").read_text())),
        "manifest": set(json.loads((checkpoint / "envsdk_checkpoint.json").read_text())),
        "name": re.sub(
            r"_[0-9a-f]{5}_", "_ID_", re.sub(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", "DATE", trial.name)
        ),
    }


@pytest.mark.slow
def test_in_process_and_tune_trials_write_the_same_folder(ray_address, tmp_path):
    base = {"run": "PPO", "env": "CartPole-v1", "stop": {"training_iteration": 2}, "checkpoint_freq": 1}
    experiments = {
        "same": {**base, "config": CONFIG},  # one trial: in train.py's process
        "tuned": {**base, "max_failures": 1, "config": CONFIG},  # max_failures needs Tune
    }
    (tmp_path / "exp.yaml").write_text(yaml.safe_dump(experiments))
    # Joined to the session's Ray (conftest.py), as every other training test: a Ray of its own cost
    # this test ~10 s of start-up, and neither runner's folder depends on which cluster it ran on.
    args = ["-f", "exp.yaml", "--ray-address", ray_address, "--local-dir", str(tmp_path / "results")]
    out = run_train(args, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    (ours,) = (tmp_path / "results" / "same").glob("PPO_*")
    (tunes,) = (tmp_path / "results" / "tuned").glob("PPO_*")
    a, b = _folder(ours), _folder(tunes)
    assert a["columns"] >= b["columns"]  # ours adds the columns of metrics that appear later; Tune cannot
    del a["columns"], b["columns"]
    assert a == b
