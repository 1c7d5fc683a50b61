"""``initialize_from``: a run's policies start from another run's weights (mlagents-learn's
``--initialize-from`` and ``init_path``), checked before anything starts."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import numpy as np
import pytest

from envsdk.errors import UserError
from envsdk.internals.checkpoint_layout import CHECKPOINT_MARKER, MODULE_DIR, MODULE_STATE_FILE
from envsdk.training.hooks.initialize_from import newest_checkpoint, sources
from tests.helpers import run_train

PPO = "exp:\n  run: PPO\n  env: CartPole-v1\n  stop: {training_iteration: 1}\n  config:\n"
SMALL = "    train_batch_size: 200\n    minibatch_size: 50\n    num_env_runners: 0\n"


def _weights(run: Path, policy: str = "default_policy") -> dict[str, np.ndarray]:
    (checkpoint,) = sorted(run.glob("*/*/checkpoint_*"))[-1:]
    state = pickle.loads((checkpoint / MODULE_DIR / policy / MODULE_STATE_FILE).read_bytes())
    return {k: np.asarray(v) for k, v in state.items()}


@pytest.mark.slow
def test_a_run_starts_from_the_weights_of_another(tmp_path):
    """Run B starts from run A's newest checkpoint and trains at a learning rate of 1e-12: B's
    weights are A's (and a run without initialize_from keeps weights of its own)."""
    (tmp_path / "a.yaml").write_text(PPO + SMALL)
    first = run_train(["-f", str(tmp_path / "a.yaml"), "--local-dir", str(tmp_path / "a")])
    assert first.returncode == 0, first.stderr[-2000:]
    frozen = SMALL + "    lr: 1.0e-12\n"
    (tmp_path / "b.yaml").write_text(PPO + frozen + f"    initialize_from: {tmp_path / 'a'}\n")
    second = run_train(["-f", str(tmp_path / "b.yaml"), "--local-dir", str(tmp_path / "b")])
    assert second.returncode == 0, second.stderr[-2000:]
    assert "initialize_from: policy 'default_policy' starts from the weights of" in second.stderr
    (tmp_path / "c.yaml").write_text(PPO + frozen)
    third = run_train(["-f", str(tmp_path / "c.yaml"), "--local-dir", str(tmp_path / "c")])
    assert third.returncode == 0, third.stderr[-2000:]
    a, b, c = (_weights(tmp_path / x) for x in "abc")
    assert a.keys() == b.keys() and all(np.allclose(a[k], b[k], atol=1e-6) for k in a)
    assert not all(np.allclose(a[k], c[k], atol=1e-6) for k in a)


def _checkpoint(folder: Path, *policies: str) -> Path:
    for policy in policies:
        (folder / MODULE_DIR / policy).mkdir(parents=True)
    (folder / CHECKPOINT_MARKER).write_text("{}")
    return folder


def test_the_newest_checkpoint_of_a_run_is_read(tmp_path):
    older = _checkpoint(tmp_path / "run" / "trial" / "checkpoint_000000", "p")
    newer = _checkpoint(tmp_path / "run" / "trial" / "checkpoint_000001", "p")
    assert newest_checkpoint(tmp_path, "run", "here") == newer
    assert newest_checkpoint(tmp_path, older, "here") == older


@pytest.mark.parametrize(
    ("given", "policies", "message"),
    [
        ({"*": "ckpt"}, ["x"], "holds no policy of this run (it has p, q)"),
        ({"pp": "ckpt"}, ["p", "q"], "did you mean 'p'"),
        ({"r": "ckpt"}, ["r"], "holds no policy 'r' (it has p, q)"),
    ],
)
def test_a_policy_the_run_or_the_checkpoint_lacks_is_refused(tmp_path, given, policies, message):
    checkpoint = _checkpoint(tmp_path / "ckpt", "p", "q")
    with pytest.raises(UserError, match=re.escape(message)):
        sources({k: checkpoint for k in given}, policies, "exp.yaml:7")


def test_every_policy_both_hold_and_one_of_its_own(tmp_path):
    shared, own = _checkpoint(tmp_path / "shared", "p", "q"), _checkpoint(tmp_path / "own", "q")
    assert sources({"*": shared, "q": own}, ["p", "q", "r"], "here") == {"p": shared, "q": own}


@pytest.mark.parametrize(("path", "message"), [("nowhere", "no such folder"), ("empty", "no checkpoint in")])
def test_a_path_with_no_checkpoint_is_refused_before_anything_starts(tmp_path, path, message):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=message):
        newest_checkpoint(tmp_path, path, "here")
