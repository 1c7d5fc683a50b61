"""The README's 20-line example trains as written: its env file and its YAML, copied out of it."""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT, run_train


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


@pytest.mark.slow
def test_the_readme_example_trains_and_rolls_out(tmp_path):
    (code,) = _blocks("python")
    (experiment,) = _blocks("yaml")
    env_file = re.search(r"^# (\S+\.py)$", code, flags=re.M)
    yaml_file = re.search(r"^# (\S+\.yaml):", experiment, flags=re.M)
    assert env_file and yaml_file, "each block names its file on its first line"
    assert len(code.splitlines()) <= 25
    (tmp_path / env_file.group(1)).write_text(code)
    (tmp_path / yaml_file.group(1)).write_text(experiment)
    out = run_train(["-f", yaml_file.group(1), "--local-dir", str(tmp_path / "results")], cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    done = re.search(r"^done: corridor: return (-?[\d.]+)", out.stdout, flags=re.M)
    assert done and float(done.group(1)) >= 0.7, out.stdout[-2000:]
