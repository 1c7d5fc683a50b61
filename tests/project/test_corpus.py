"""Experiment files as users have them: each trains unchanged, or is refused for a reason docs/yaml.md lists.

``tests/data/corpus/`` holds files in the style of RLlib's ``rllib/tuned_examples/``
from Ray 0.8 to 2.x (``tests/data/corpus/SOURCES.md`` names the file each one
follows).  Every file either

* trains for an iteration with env steps sampled in each of its trials
  (all such files run in one ``train.py`` with several ``-f``, as short as their
  algorithm allows), or
* exits with status 2 before Ray starts, with an ``error:`` line that carries
  one of the phrases of docs/yaml.md's "What cannot run" table.

Which of the two is fixed per file in :data:`REFUSED`, so a file that trains
today cannot slip into a refusal unnoticed.  ``ENVSDK_CORPUS=/a/folder`` adds
a folder of other files (RLlib's own, for instance): those must train or be
refused for a listed reason.
"""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import ROOT, progress_rows, run_train

CORPUS = ROOT / "tests" / "data" / "corpus"
# file -> the docs/yaml.md phrase its refusal must carry
REFUSED = {
    "cartpole-a2c.yaml": "was removed from RLlib",
    "cartpole-apex.yaml": "was removed from RLlib",
    "cartpole-es.yaml": "was removed from RLlib",
    "cartpole-pg.yaml": "was removed from RLlib",
    "pendulum-ddpg.yaml": "was removed from RLlib",
    "pendulum-td3.yaml": "was removed from RLlib",
    "cartpole-bc.yaml": "the offline data",
    "cartpole-marwil.yaml": "the offline data",
    "pendulum-cql.yaml": "the offline data",
    "cartpole-dqn-softq.yaml": "has no equivalent on RLlib 2.60's new API stack",
}
TRAINED = sorted(p.name for p in CORPUS.glob("*.yaml") if p.name not in REFUSED)
EXTERNAL = sorted(Path(os.environ["ENVSDK_CORPUS"]).glob("*.y*ml")) if os.environ.get("ENVSDK_CORPUS") else []

# The trainable files run in one train.py process, which the first test waits for (3-5 min).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]


def readme_reasons() -> list[str]:
    """The phrases (first backticked cell) of docs/yaml.md's "What cannot run" table."""
    text = (ROOT / "docs" / "yaml.md").read_text()
    section = text.split("## What cannot run", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, flags=re.M)


@functools.cache  # the same file's refusal is read by several tests: one train.py each (~4 s)
def refuse(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", str(path), "--stop-iters", "2", "--dry-run"],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_refusal_reason_is_in_the_docs():
    assert set(REFUSED.values()) <= set(readme_reasons())


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_for_a_listed_reason(name):
    out = refuse(CORPUS / name)
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert out.returncode == 2 and len(errors) == 1, out.stdout + out.stderr
    assert REFUSED[name] in errors[0]
    assert "Traceback" not in out.stderr and "fix:" in out.stderr


def test_removed_algorithms_name_their_replacement():
    for name, nearest in [
        ("cartpole-a2c.yaml", "PPO"),
        ("pendulum-ddpg.yaml", "SAC"),
        ("cartpole-apex.yaml", "DQN"),
    ]:
        assert f"the nearest is {nearest}" in refuse(CORPUS / name).stderr


def test_missing_offline_data_is_named():
    assert "'/tmp/out'" in refuse(CORPUS / "cartpole-marwil.yaml").stderr
    assert "'tests/data/pendulum/enormous.zip'" in refuse(CORPUS / "pendulum-cql.yaml").stderr


# One short iteration: the trials' start (a process for each trial of a grid and each remote env
# runner) is most of the cost, a second iteration added a fifth to it. IMPALA and APPO would fill it
# to RLlib's min_time_s_per_iteration of 10 s (six trials: a minute); 1 s leaves the asynchronous
# runners time to deliver (with 0, the iteration ends before any sample arrives). 1,000 steps pass
# every file's learning start (cartpole-dqn-0.8's learning_starts: 1000), so each learner updates.
FLAGS = [
    "--stop-iters", "1",
    "--config.min_time_s_per_iteration=1",
    "--config.min_sample_timesteps_per_iteration=1000",
]  # fmt: skip


@pytest.fixture(scope="module")
def corpus_run(ray_address, tmp_path_factory):
    """All trainable files in one train.py (several ``-f``); returns (stdout+stderr, results)."""
    results = tmp_path_factory.mktemp("corpus") / "results"
    files = [arg for name in TRAINED for arg in ("-f", str(CORPUS / name))]
    out = run_train(
        [*files, *FLAGS, "--ray-address", ray_address, "--local-dir", str(results)], cwd=CORPUS, timeout=1500
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    return out.stdout + out.stderr, results


@pytest.mark.parametrize("name", TRAINED)
def test_trains_unchanged(corpus_run, name):
    _, results = corpus_run
    for experiment in yaml.safe_load((CORPUS / name).read_text()):
        trials = sorted(p.parent for p in (results / experiment).glob("*/progress.csv"))
        assert trials, f"{experiment}: no trial folder"
        for trial in trials:
            rows = progress_rows(trial)
            assert len(rows) == 1, trial
            assert float(rows[-1]["num_env_steps_sampled_lifetime"]) > 0, trial


def test_translations_are_announced(corpus_run):
    log, _ = corpus_run
    for expected in [
        "framework 'tf' runs as torch",
        "env 'Pendulum-v0' is retired: using 'Pendulum-v1'",
        "env 'CartPole-v0' is an older version: gymnasium's current one is 'CartPole-v1'",
        "config key 'horizon' is a time limit of 200 steps on the env",
        "observation_filter: MeanStdFilter",
        "vtrace: false",
    ]:
        assert expected in log, expected


@pytest.mark.parametrize("path", EXTERNAL, ids=[p.name for p in EXTERNAL])
def test_external_file_trains_or_is_refused_for_a_listed_reason(ray_address, tmp_path, path):
    out = refuse(path)
    if out.returncode == 2:
        error = next(line for line in out.stderr.splitlines() if line.startswith("error:"))
        assert any(reason in error for reason in readme_reasons()), error
        return
    assert out.returncode == 0, out.stdout + out.stderr
    trained = run_train(
        ["-f", str(path), *FLAGS, "--ray-address", ray_address, "--local-dir", str(tmp_path)],
        cwd=path.parent,
        timeout=900,
    )
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
