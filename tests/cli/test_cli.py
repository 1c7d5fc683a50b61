"""The ``envsdk`` command, and what a run imports (plugins only when an env names one)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import ROOT

pytestmark = pytest.mark.slow  # each command is a Python process that imports RLlib


def envsdk(*args: str, cwd=ROOT) -> subprocess.CompletedProcess:
    """``python -m envsdk ...`` with this checkout's package, wherever it runs."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "envsdk", *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=env
    )


def test_usage_lists_every_command_with_an_example():
    from envsdk.cli.main import COMMANDS

    bare, helped = envsdk(), envsdk("--help")
    assert bare.returncode == 2 and helped.returncode == 0
    for name, command in COMMANDS.items():
        assert f"  {name} " in helped.stdout and command.example in helped.stdout


def test_unknown_command_suggests_the_closest():
    out = envsdk("trian")
    assert out.returncode == 2
    assert "unknown command 'trian'" in out.stderr and "did you mean 'train'?" in out.stderr


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("train", ["-f FILE", "--translate-algo", "examples:"]),
        ("rollout", ["--episodes", "--export-onnx", "examples:"]),
        ("evaluate", ["--steps", "--video DIR, --video-dir DIR", "--render, --no-render"]),
        ("export", ["checkpoint", "file"]),
        ("check", ["--env-config"]),
        ("new", ["--dir"]),
        ("slurm", ["--nodes", "--requeue"]),
    ],
)
def test_each_command_has_help_with_its_own_name(command, flags):
    out = envsdk(command, "--help")
    assert out.returncode == 0, out.stderr
    assert f"usage: envsdk {command}" in out.stdout
    for flag in flags:
        assert flag in out.stdout, flag


def test_train_py_and_envsdk_train_are_the_same_code(tmp_path):
    via_script = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--run", "PPO", "--env", "CartPole-v1", "--dry-run"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    via_command = envsdk("train", "--run", "PPO", "--env", "CartPole-v1", "--dry-run", cwd=tmp_path)
    assert via_script.returncode == via_command.returncode == 0
    assert via_script.stdout == via_command.stdout


PROBE = """
import sys
from envsdk.cli.train import main
code = main(["--run", "PPO", "--env", "{env}", "--dry-run"])
plugins = {{"grpc", "unity_bridge", "broken_plugin"}}
print("IMPORTED", sorted({{m.split(".")[0] for m in sys.modules}} & plugins))
"""


@pytest.fixture
def broken_plugin(tmp_path):
    """An installed package (a dist-info on sys.path) whose env entry point fails to import."""
    dist = tmp_path / "broken_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[envsdk.envs]\nbroken-env = broken_plugin:Env\n")
    (tmp_path / "broken_plugin.py").write_text("raise ImportError('libfoo.so: cannot open shared object')\n")
    return tmp_path


def _probe(env_id: str, path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(PROBE.format(env=env_id))],
        cwd=path, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": f"{path}:{ROOT}"},
    )  # fmt: skip


def test_a_cartpole_run_imports_no_plugin(broken_plugin):
    out = _probe("CartPole-v1", broken_plugin)
    assert out.returncode == 0, out.stderr
    assert "IMPORTED []" in out.stdout  # neither the Unity bridge (gRPC) nor the broken plugin


def test_a_broken_plugin_is_an_error_only_when_named(broken_plugin):
    from envsdk.envs.registry import registered_ids

    assert {"unity", "unity-single"} <= set(registered_ids())
    out = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "--run", "PPO", "--env", "broken-env", "--dry-run"],
        cwd=broken_plugin, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": f"{broken_plugin}:{ROOT}"},
    )  # fmt: skip
    assert out.returncode == 2
    assert "env 'broken-env': its plugin broken_plugin:Env failed to import" in out.stderr
    assert "libfoo.so" in out.stderr and "Traceback" not in out.stderr


def test_bash_completion_knows_commands_and_flags(tmp_path):
    script = tmp_path / "envsdk.bash"
    out = envsdk("completion")
    assert out.returncode == 0, out.stderr
    script.write_text(out.stdout)
    probe = (
        f"source {script}\n"
        "COMP_WORDS=(envsdk ev); COMP_CWORD=1; _envsdk; echo ${COMPREPLY[@]}\n"
        "COMP_WORDS=(envsdk train --stop-i); COMP_CWORD=2; _envsdk; echo ${COMPREPLY[@]}\n"
        "COMP_WORDS=(envsdk rollout --export); COMP_CWORD=2; _envsdk; echo ${COMPREPLY[@]}\n"
    )
    lines = subprocess.run(["bash", "-c", probe], capture_output=True, text=True).stdout.splitlines()
    assert lines == ["evaluate", "--stop-iters", "--export-onnx --export-unity"]


def test_the_version_is_printed_and_the_changelog_has_it_and_the_checkpoint_format():
    import re

    import envsdk
    from envsdk.training.run.checkpoints import FORMAT

    for script in ("train.py", "rollout.py"):
        out = subprocess.run([sys.executable, script, "--version"], cwd=ROOT, capture_output=True, text=True)
        assert out.returncode == 0 and out.stdout.strip() == f"{script} (envsdk {envsdk.__version__})"
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## {re.escape(envsdk.__version__)} \(", changelog, re.M)
    assert re.search(rf"^\| {FORMAT} \| ", changelog, re.M)
