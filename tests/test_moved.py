"""Modules that moved into sub-packages: old names still import, and a checkpoint from before loads."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys

import pytest

from envsdk.moved import MOVED, new_name
from tests.helpers import ROOT

BEFORE = ROOT / "tests" / "data" / "checkpoint-before-subpackages"  # written by envsdk at c4da837


@pytest.mark.parametrize("old", [*MOVED, "default_models.masking", "default_models.catalogs"])
def test_old_name_is_the_new_module(old):
    new = new_name(f"envsdk.{old}")
    assert new is not None
    assert importlib.import_module(f"envsdk.{old}") is importlib.import_module(new)
    assert not (ROOT / "envsdk" / f"{old.replace('.', '/')}.py").exists(), "a moved module is back"


def test_names_that_did_not_move_are_left_alone():
    assert new_name("envsdk.errors") is None and new_name("envsdk.config.legacy") is None
    assert new_name("other.base") is None


def test_checkpoint_written_before_the_move_rolls_out(tmp_path):
    """Its pickles name envsdk.default_models.*, envsdk.failures and envsdk.observation_filter."""
    pickles = b"".join(p.read_bytes() for p in BEFORE.rglob("*.pkl"))
    assert b"envsdk.default_models.masking" in pickles and b"envsdk.observation_filter" in pickles
    checkpoint = shutil.copytree(BEFORE, tmp_path / "run") / "checkpoint_000000"
    out = subprocess.run(
        [sys.executable, str(ROOT / "rollout.py"), str(checkpoint), "--episodes", "2"],
        cwd=ROOT / "configs",  # where its env, masked_env.py, lives
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count("episode ") >= 2 and "return mean" in out.stdout, out.stdout
    assert (checkpoint / "rollout.npz").is_file()
