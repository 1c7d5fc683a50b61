"""The README's quick-start block is what its command produces (benchmarks/quickstart.py writes it)."""

from __future__ import annotations

import re
import sys

import pytest

from tests.helpers import ROOT, run_train

sys.path.insert(0, str(ROOT / "benchmarks"))
from quickstart import BEGIN, DONE, END, SPREAD

TOLERANCE = 1.5  # a fresh, unseeded run lands within the documented spread, widened by this factor


def _documented() -> tuple[str, tuple[int, int]]:
    text = (ROOT / "README.md").read_text()
    block = text[text.index(BEGIN) : text.index(END)]
    spread = SPREAD.search(block)
    assert spread, "README's quick-start block has no spread line: python benchmarks/quickstart.py"
    return block, (int(spread.group(1)), int(spread.group(2)))


def test_the_block_is_one_of_the_runs_it_summarises():
    block, (low, high) = _documented()
    done = DONE.search(block)
    assert done, block
    assert low <= int(done.group(2).replace(",", "")) <= high


@pytest.mark.slow
def test_make_train_lands_in_the_documented_spread(tmp_path):
    """``make train``'s command, as shipped and unseeded: its env steps to solve."""
    _, (low, high) = _documented()
    out = run_train(["-f", "configs/cartpole-ppo.yaml", "--local-dir", str(tmp_path)], timeout=570)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    done = DONE.search(out.stdout)
    assert done, out.stdout[-2000:]
    steps = int(done.group(2).replace(",", ""))
    assert low / TOLERANCE <= steps <= high * TOLERANCE, (steps, low, high)
    assert re.search(r"^\[cartpole-ppo\] iter 1 \|", out.stdout, re.M)
