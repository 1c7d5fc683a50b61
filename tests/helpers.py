"""Helpers the tests share (fixtures live in conftest.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
# `make test` runs the suite in pytest-xdist workers (gw0, gw1, ...); every process a worker
# starts (train.py, Ray's head and workers, players, Xvfb) inherits this variable.
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _players_folder() -> Path:
    """The stand-in players of this test session (of this worker, under xdist): outside the
    checkout, found through the bridge's player path, which subprocesses inherit; conftest's
    standin_builds writes them and removes them when the session (the worker) ends."""
    path = os.environ.get("ENVSDK_PLAYER_PATH") or tempfile.mkdtemp(prefix="envsdk-players-")
    if WORKER and not path.endswith(f"-{WORKER}"):  # the controller's folder, inherited: one each
        path = f"{path}-{WORKER}"
    os.environ["ENVSDK_PLAYER_PATH"] = path
    return Path(path)


PLAYERS = _players_folder()


needs_xvfb = pytest.mark.skipif(
    shutil.which("Xvfb") is None, reason="Xvfb is not installed (`make test` installs it when run as root)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ours(proc: Path) -> bool:
    """Whether a process belongs to this xdist worker (any process, outside xdist): started by it,
    or by what it started, all of which inherit its PYTEST_XDIST_WORKER."""
    mark = f"\0PYTEST_XDIST_WORKER={WORKER}\0".encode()
    return not WORKER or mark in b"\0" + (proc / "environ").read_bytes()


def processes_mentioning(text: str) -> list[int]:
    """Pids of this worker's processes whose command line contains ``text`` (Ray's carry their
    temp dir)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if text.encode() in (proc / "cmdline").read_bytes() and _ours(proc):
                    found.append(int(proc.name))
    return found


def end_processes_mentioning(text: str) -> None:
    """SIGKILL what outlived a Ray cluster's own shut-down (a worker of a failed run once did)."""
    for pid in processes_mentioning(text):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def keep_substitutions_on(monkeypatch: pytest.MonkeyPatch, names: Iterable[str]) -> None:
    """Where the suite runs on stock RLlib (ENVSDK_STOCK), these substitutions on all the same (a
    test of them: ``@pytest.mark.substitution(name)``, or a fixture that trains with them)."""
    from envsdk import substitutions

    if not os.environ.get(substitutions.STOCK):
        return
    off = substitutions.off_in_environment() - set(names)
    monkeypatch.setenv(substitutions.STOCK, ",".join(sorted(off)) or "0")
    monkeypatch.delenv(substitutions.NO_PATCHES, raising=False)


def run_train(args: list[str], cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """train.py in a process group of its own, ended whole if the test stops waiting for it (this
    ``timeout``, which must be shorter than pytest-timeout's, or the test's own time-out)."""
    return run_group([sys.executable, str(ROOT / "train.py"), *args], cwd=cwd, timeout=timeout)


def run_group(command: list[str], cwd: Path = ROOT, timeout: int = 300) -> subprocess.CompletedProcess:
    """``subprocess.run`` in a new session; on a time-out, or any exception while waiting
    (pytest-timeout's included), SIGKILL the whole group: Ray's processes and players too."""
    proc = subprocess.Popen(
        command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr)


def train_experiments(
    folder: Path, experiments: dict, ray_address: str
) -> tuple[subprocess.CompletedProcess, Path]:
    """One train.py run of every experiment (written to ``folder``/experiments.yaml), joined to the
    session's Ray; returns its output and the results folder."""
    (folder / "experiments.yaml").write_text(yaml.safe_dump(experiments, sort_keys=False))
    results = folder / "results"
    out = run_train(
        ["-f", "experiments.yaml", "--ray-address", ray_address, "--local-dir", str(results)],
        cwd=folder,
        timeout=570,  # under pytest-timeout's 600 s
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out, results


def start_train(args: list[str]) -> subprocess.Popen:
    """train.py in its own session, output piped: for tests that signal it mid-run."""
    return subprocess.Popen(
        [sys.executable, "train.py", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip


def wait_for_rows(results: Path, proc: subprocess.Popen, rows: int, timeout: float = 180) -> Path:
    """Wait until the first trial under ``results`` has ``rows`` iterations; returns the trial."""
    deadline = time.time() + timeout
    while True:
        trials = trial_dirs(results)
        if trials and len(progress_rows(trials[0])) >= rows:
            return trials[0]
        assert proc.poll() is None and time.time() < deadline, "training did not get going"
        time.sleep(0.2)


def trial_dirs(results: Path) -> list[Path]:
    return sorted(p.parent for p in results.glob("*/*/progress.csv"))


def progress_rows(trial: Path) -> list[dict]:
    import csv

    with (trial / "progress.csv").open() as fh:
        return list(csv.DictReader(fh))


def tensorboard_scalars(trial: Path) -> dict[str, dict[int, float]]:
    """A trial folder's TensorBoard scalars: tag -> {step: value}, read from the event file's records
    (TFRecord framing: 8-byte length, 4-byte CRC, the ``Event`` bytes, 4-byte CRC)."""
    from tensorboardX.proto.event_pb2 import Event

    (path,) = trial.glob("events.out.tfevents*")
    data, pos, scalars = path.read_bytes(), 0, {}
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        event = Event.FromString(data[pos + 12 : pos + 12 + length])
        pos += 12 + length + 4
        for value in event.summary.value:
            scalars.setdefault(value.tag, {})[event.step] = value.simple_value
    return scalars


def player_pids() -> set[int]:
    """This worker's stand-in players and Xvfb servers running right now (to check nothing is
    left behind)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = status.read_bytes().replace(b"\0", b" ")
            if (b"unity_bridge.standin.player" in cmd or cmd.startswith(b"Xvfb")) and _ours(status.parent):
                found.add(int(status.parent.name))
        except OSError:
            continue
    return found


def export_and_check_brains(checkpoint: Path, out: Path, target: str = "sentis") -> dict:
    """``rollout.py --export-unity`` for ``target`` with a greedy recording beside it, then on every
    brain file: the Unity loader's rules and the target's operators, parity with the recorded greedy
    actions (continuous ones mapped into [-1, 1] as the game got them), and 10,000 sampled draws that
    never pick a masked action.  Returns brains.json."""
    import json

    import numpy as np

    from envsdk.evaluation.unity_brain import MASKS, BrainSpec, check_brain
    from unity_bridge.settings import to_unity_range
    from unity_bridge.targets import TARGETS

    brains, recording = out / "brains", out / "greedy.npz"
    roll = subprocess.run(
        [sys.executable, str(ROOT / "rollout.py"), str(checkpoint), "--export-unity", str(brains),
         "--unity-target", target, "--episodes", "2", "--no-explore", "--out", str(recording)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert roll.returncode == 0, roll.stdout[-2000:] + roll.stderr[-3000:]
    index = json.loads((brains / "brains.json").read_text())
    data = np.load(recording)
    for behavior, entry in index["behaviors"].items():
        spec = BrainSpec(
            behavior,
            entry["policy"],
            tuple((name, tuple(shape)) for name, shape in entry["observations"]),
            entry["continuous"],
            tuple(entry["branches"]),
            entry["continuous_actions"],
        )
        path = brains / entry["file"]
        assert index["unity_target"] == target and index["opset"] == TARGETS[target].opset
        assert check_brain(path, spec, TARGETS[target]) == [], (behavior, check_brain(path, spec))
        feeds, greedy = _recorded(data, behavior, spec)
        got = _onnx(path, feeds)
        if spec.branches:
            assert np.array_equal(got["deterministic_discrete_actions"], greedy["discrete"]), behavior
            one = {k: np.repeat(v[:1], 10_000, axis=0) for k, v in feeds.items()}
            if MASKS in one:
                one[MASKS][:, :] = 1.0
                one[MASKS][:, 0] = 0.0  # the first choice of the first branch is forbidden
            drawn = _onnx(path, one)["discrete_actions"]
            assert (drawn[:, 0] != 0).all(), f"{behavior}: a masked action was sampled"
            assert len(np.unique(drawn[:, 0])) > 1 or spec.branches[0] == 2, "sampling never varies"
        if spec.continuous:
            want = to_unity_range(greedy["continuous"], spec.continuous_actions)
            assert np.allclose(got["deterministic_continuous_actions"], want, atol=1e-5), behavior
    return index


def _onnx(path: Path, feeds: dict) -> dict:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds), strict=True))


def _recorded(data, behavior: str, spec) -> tuple[dict, dict]:
    """A behavior's recorded steps as brain inputs, and the greedy actions taken on them."""
    import numpy as np

    from envsdk.envs.base import MASK_KEY, OBS_KEY
    from envsdk.envs.checker import AGENT

    def recorded(agent: str) -> list[str]:
        return sorted({k.rsplit("/actions", 1)[0] for k in data.files if agent in k and "/actions" in k})

    # A game as a gymnasium env (env: unity-single) records its one behavior's one agent as `agent`.
    agents = recorded(f"/{behavior}/") or recorded(f"/{AGENT}/")
    assert agents, f"no recorded steps of {behavior}"
    masked = any(f"{a}/obs/{MASK_KEY}" in data.files for a in agents)
    names = [name for name, _ in spec.observations]
    feeds: dict[str, list] = {f"obs_{i}": [] for i in range(len(names))}
    greedy: dict[str, list] = {"continuous": [], "discrete": []}
    for agent in agents:
        base = f"{agent}/obs/{OBS_KEY}" if masked else f"{agent}/obs"
        steps = len(data[f"{agent}/actions" if f"{agent}/actions" in data.files else f"{agent}/actions/0"])
        for i, name in enumerate(names):
            feeds[f"obs_{i}"].append(data[base if len(names) == 1 else f"{base}/{name}"][:steps])
        if masked:
            feeds.setdefault("action_masks", []).append(data[f"{agent}/obs/{MASK_KEY}"][:steps])
        if spec.continuous and spec.branches:
            greedy["continuous"].append(data[f"{agent}/actions/0"])
            greedy["discrete"].append(data[f"{agent}/actions/1"].reshape(steps, -1))
        elif spec.continuous:
            greedy["continuous"].append(data[f"{agent}/actions"])
        else:
            greedy["discrete"].append(data[f"{agent}/actions"].reshape(steps, -1))
    if spec.branches and "action_masks" not in feeds:
        feeds["action_masks"] = [np.ones((len(g), sum(spec.branches))) for g in greedy["discrete"]]
    stacked = {k: np.concatenate(v).astype(np.float32) for k, v in feeds.items()}
    return stacked, {k: np.concatenate(v) for k, v in greedy.items() if v}


MATRIX_ENV = ROOT / "tests" / "data" / "envs" / "matrix_env.py"


def built_config(
    tmp_path: Path, run: str, obs: str, act: str, mask: bool, overrides: dict | None = None, **config: Any
) -> Any:
    """train.py's BuiltConfig for tests/data/envs/matrix_env.py's spaces (``config``: the YAML's, then
    ``overrides`` as from the command line)."""
    shutil.copy(MATRIX_ENV, tmp_path / "matrix_env.py")
    settings = {
        "run": run,
        "env": "matrix_env.MatrixEnv",
        "config": {
            "env_config": {"obs": obs, "act": act, "mask": mask},
            "num_env_runners": 0,
            "train_batch_size": 16,
            # DQN and SAC: 32 env steps an iteration, not RLlib's 1,000 and 100 (each step still learns)
            **(
                {"num_steps_sampled_before_learning_starts": 16, "min_sample_timesteps_per_iteration": 32}
                if run in ("DQN", "SAC")
                else {}
            ),
            **config,
        },
    }
    return built_from(tmp_path, settings, overrides)


def built_from(tmp_path: Path, settings: dict[str, Any], overrides: dict | None = None) -> Any:
    """train.py's BuiltConfig of one experiment (``settings``: its YAML as a dict), written to
    tmp_path/exp.yaml and loaded from there."""
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"exp": settings}))
    (exp,) = load_experiments(path)
    return build_config(exp, overrides)


Step = Callable[[Any, Any], Any]  # an env class's step function: (env, actions) -> results


def failing_every(n: int, step: Step, calls: dict[str, int], limit: int = 2000) -> Step:
    """An env class's ``step`` function that raises ``ValueError`` (a message of two lines) at every
    ``n``-th call (counted in ``calls["n"]``, across instances), else calls ``step``; past ``limit``
    calls it fails the test, through any ``except Exception`` (a sampler that would step for ever)."""

    def every_nth(env: Any, actions: Any) -> Any:
        calls["n"] += 1
        if calls["n"] > limit:
            pytest.fail(f"the env was stepped {limit} times: the sampler goes on for ever")
        if calls["n"] % n == 0:
            raise ValueError("the game crashed\n(frame 9)")
        return step(env, actions)

    return every_nth


def built_algorithm(tmp_path: Path, run: str, obs: str, act: str, mask: bool, **config: Any) -> Any:
    """An Algorithm as train.py builds it, in this process, on tests/data/envs/matrix_env.py's spaces.

    Call it inside ``internals.without_object_store()``, and ``stop()`` it.
    """
    built = built_config(tmp_path, run, obs, act, mask, **config)
    return built.algo_class(config=built.config)


def rollout_in_process(*args: Any) -> tuple[int, str]:
    """rollout.py's own code, in this process (each run would otherwise pay a Python start);
    returns its exit status and stdout (stderr passes through)."""
    done = rollout_here(*args)
    sys.stderr.write(done.stderr)
    return done.returncode, done.stdout


def rollout_here(*args: Any, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """rollout.py run in this process from ``cwd``, its exit status and output captured as a
    subprocess's would be (run_cli's error lines, no traceback, included)."""
    import io

    from envsdk.cli.rollout import main
    from envsdk.errors import run_cli

    out, err, environ = io.StringIO(), io.StringIO(), dict(os.environ)
    try:
        with contextlib.chdir(cwd), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run_cli(main, [str(a) for a in args])
    finally:  # rollout.py sets SDL's drivers for pygame in its own process; keep this one clean
        os.environ.clear()
        os.environ.update(environ)
    return subprocess.CompletedProcess(["rollout.py", *map(str, args)], code, out.getvalue(), err.getvalue())
