"""rollout.py on real checkpoints: episodes, experience files, videos, ONNX, bad input.

Each run under test is trained here by train.py (a few iterations, joined to
the session's Ray head); rollout.py's code then runs in this process (its
start would cost more than most of these rollouts), or as a real subprocess
where the process matters (Ray workers, a fresh interpreter's imports), and
its printed figures are checked against the files it wrote.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest
import yaml

import envsdk
from envsdk import internals
from tests.helpers import ROOT, rollout_here, run_train

EPISODE = re.compile(r"^episode (\d+): return (-?[\d.]+), length (\d+)(.*)$", re.M)


# Trained for one iteration, in one train.py: name -> its config
ONE_ITERATION = {"pixels": "pixels", "multi": "multi-agent", "masked": "action-mask",
                 "modelv2": "custom-model-modelv2"}  # fmt: skip


def experiment_of(config: str) -> str:
    (name,) = yaml.safe_load((ROOT / "configs" / f"{config}.yaml").read_text())
    return name


@pytest.fixture(scope="module")
def trained(ray_address, tmp_path_factory):
    """name -> experiment folder, trained once for this module."""
    root = tmp_path_factory.mktemp("rollout")
    runs = {
        "cartpole": ["-f", "configs/cartpole-ppo.yaml", "--stop-iters", "3", "--checkpoint-freq", "1"],
        # one train.py for the configs trained for an iteration (each train.py pays RLlib's import)
        "together": [
            *(arg for config in ONE_ITERATION.values() for arg in ("-f", f"configs/{config}.yaml")),
            "--stop-iters", "1",
        ],
        "pendulum": [
            "--run", "PPO", "--env", "Pendulum-v1", "--stop-iters", "1", "--config.num_env_runners=0",
            "--config.train_batch_size=400", "--config.minibatch_size=200",
        ],
    }  # fmt: skip
    out = {}
    for name, args in runs.items():
        storage = root / name
        done = run_train(
            [*args, "--checkpoint-at-end", "--ray-address", ray_address, "--local-dir", str(storage)]
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        if name == "together":
            out.update({short: storage / experiment_of(config) for short, config in ONE_ITERATION.items()})
        else:
            out[name] = next(p for p in storage.iterdir() if p.is_dir())
    return out


def rollout_process(*args: Any, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "rollout.py"), *map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )


def episodes(stdout: str) -> list[tuple[float, int, str]]:
    return [(float(r), int(n), rest) for _, r, n, rest in EPISODE.findall(stdout)]


def checkpoint_of(stdout: str) -> Path:
    return Path(re.search(r"^checkpoint: (\S+)", stdout, re.M).group(1))


def test_episodes_and_experience_file(trained):
    out = rollout_here(trained["cartpole"], "--episodes", "3", "--save-info", "--seed", "0")
    assert out.returncode == 0, out.stderr
    eps = episodes(out.stdout)
    assert len(eps) == 3
    assert re.search(r"^3 episodes \| return mean [\d.]+, std", out.stdout, re.M)
    # An experiment folder means its best trial's latest checkpoint (no score attribute set).
    ckpt = checkpoint_of(out.stdout)
    assert ckpt.name == "checkpoint_000002"
    data = np.load(ckpt / "rollout.npz")  # default place: the checkpoint folder
    meta = json.loads(str(data["meta"]))
    assert meta["episodes"] == 3 and meta["algorithm"] == "PPO" and meta["env"] == "CartPole-v1"
    for e, (ret, length, _) in enumerate(eps):
        ep = f"ep{e:04d}/agent"
        assert data[f"{ep}/obs"].shape == (length + 1, 4)
        assert data[f"{ep}/actions"].shape == (length,)
        assert data[f"{ep}/rewards"].sum() == pytest.approx(ret)
        assert len(data[f"{ep}/infos"]) == length + 1
        assert json.loads(data[f"{ep}/infos"][0]) == {}
        flags = data[f"{ep}/terminated"] | data[f"{ep}/truncated"]
        assert flags[-1] and not flags[:-1].any()


def test_deterministic_by_default_explore_on_request(trained):
    first = episodes(rollout_here(trained["cartpole"], "--episodes", "2", "--seed", "3", "--no-out").stdout)
    again = episodes(rollout_here(trained["cartpole"], "--episodes", "2", "--seed", "3", "--no-out").stdout)
    assert first == again and len(first) == 2
    explored = rollout_here(trained["cartpole"], "--episodes", "2", "--explore", "--seed", "3", "--no-out")
    assert explored.returncode == 0 and len(episodes(explored.stdout)) == 2


def test_steps_over_parallel_workers(trained, ray_address, tmp_path):
    out = rollout_process(
        trained["cartpole"],
        "--steps",
        "300",
        "--num-workers",
        "2",
        "--ray-address",
        ray_address,
        "--out",
        tmp_path / "exp.npz",
    )
    assert out.returncode == 0, out.stderr
    eps = episodes(out.stdout)
    assert sum(n for _, n, _ in eps) == 300  # 150 steps on each of the two workers
    # Worker 1's episodes come first and fill exactly its 150 steps.
    ends = np.cumsum([n for _, n, _ in eps])
    assert 150 in ends
    last_of_worker = {int(np.searchsorted(ends, 150)), len(eps) - 1}
    data = np.load(tmp_path / "exp.npz")
    for e, (_, _, rest) in enumerate(eps):
        terminated = bool(data[f"ep{e:04d}/agent/terminated"][-1])
        truncated = bool(data[f"ep{e:04d}/agent/truncated"][-1])
        if "cut by --steps" in rest:
            # Only a worker's last episode is cut, and the file marks it truncated, not ended.
            assert e in last_of_worker and truncated and not terminated
        else:
            # A whole episode ended by itself, even one that ended on the budget's last step.
            assert terminated or truncated
    # Each worker's last episode is cut unless the pole fell on exactly its 150th step.
    for e in last_of_worker:
        assert "cut by --steps" in eps[e][2] or data[f"ep{e:04d}/agent/terminated"][-1]


def test_video_from_render_has_a_frame_per_step(trained, tmp_path):
    out = rollout_here(trained["cartpole"], "--episodes", "2", "--video", tmp_path / "vid", "--no-out")
    assert out.returncode == 0, out.stderr
    lengths = [n for _, n, _ in episodes(out.stdout)]
    for i, length in enumerate(lengths, start=1):
        video = cv2.VideoCapture(str(tmp_path / "vid" / f"episode_{i:04d}.mp4"))
        assert int(video.get(cv2.CAP_PROP_FRAME_COUNT)) == length + 1
        ok, frame = video.read()
        assert ok and frame.shape == (400, 600, 3) and frame.std() > 0  # a drawn cart, not blank


@pytest.mark.parametrize("env_config", ["{}", "{depth: true}"])
def test_video_from_image_observations(trained, tmp_path, env_config):
    # The env has no render(): frames are its 16x16 observations (uint8 or float depth).
    out = rollout_here(
        trained["pixels"], "--episodes", "1", "--monitor", "--env-config", env_config, "--no-out"
    )
    assert out.returncode == 0, out.stderr
    [(_, length, _)] = episodes(out.stdout)
    video = cv2.VideoCapture(str(checkpoint_of(out.stdout) / "monitor" / "episode_0001.mp4"))
    assert int(video.get(cv2.CAP_PROP_FRAME_COUNT)) == length + 1
    ok, frame = video.read()
    assert ok and frame.shape == (256, 256, 3)
    channels = frame.astype(int)
    assert np.abs(channels[..., 0] - channels[..., 2]).max() <= 12  # grayscale (up to MP4 loss)
    assert frame.max() > 200 and frame.min() < 50  # the lit (or near) cell stands out


def test_video_refused_before_any_episode_when_env_has_no_frames(trained, tmp_path):
    out = rollout_here(trained["multi"], "--episodes", "1", "--video", tmp_path / "v")
    assert out.returncode == 2
    assert re.search(r"--video: \w+ has no rgb_array render and no image observation", out.stderr), out.stderr
    assert not episodes(out.stdout) and "Traceback" not in out.stderr


def test_multi_agent_per_agent_returns(trained, tmp_path):
    out = rollout_here(trained["multi"], "--episodes", "2", "--out", tmp_path / "ma.npz", "--save-info")
    assert out.returncode == 0, out.stderr
    eps = episodes(out.stdout)
    assert len(eps) == 2
    data = np.load(tmp_path / "ma.npz")
    for e, (ret, length, rest) in enumerate(eps):
        agents = dict(re.findall(r"(runner_\d) (-?[\d.]+)", rest))
        assert set(agents) == {"runner_0", "runner_1"}
        assert sum(float(v) for v in agents.values()) == pytest.approx(ret, abs=0.02)
        for agent, value in agents.items():
            assert data[f"ep{e:04d}/{agent}/rewards"].sum() == pytest.approx(float(value), abs=0.01)
        assert int(data[f"ep{e:04d}/length"]) == length


def test_old_api_stack_checkpoint(trained, tmp_path):
    out = rollout_here(trained["modelv2"], "--episodes", "2", "--run", "PPO", "--out", tmp_path / "o.npz")
    assert out.returncode == 0, out.stderr
    assert "(old API stack)" in out.stdout
    eps = episodes(out.stdout)
    data = np.load(tmp_path / "o.npz")
    assert [int(data[f"ep{e:04d}/length"]) for e in range(2)] == [n for _, n, _ in eps]


@pytest.mark.parametrize("name", ["cartpole", "masked", "modelv2", "pendulum"])
def test_onnx_matches_torch_on_env_observations(trained, tmp_path, name):
    import onnxruntime
    import torch

    from envsdk.evaluation.onnx_export import greedy, policy_nets
    from envsdk.evaluation.restore import load
    from envsdk.training.run.checkpoints import locate

    target = tmp_path / "policy.onnx"
    out = rollout_here(trained[name], "--export-onnx", target, "--episodes", "2", "--out", tmp_path / "e.npz")
    assert out.returncode == 0, out.stderr
    data = np.load(tmp_path / "e.npz")
    obs_keys = sorted(k for k in data.files if "/obs" in k and k.startswith("ep0000"))
    session = onnxruntime.InferenceSession(str(target), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    if name == "masked":
        assert names == ["observations", "action_mask"]
        feeds = {
            "observations": data["ep0000/agent/obs/observations"].astype(np.float32),
            "action_mask": data["ep0000/agent/obs/action_mask"].astype(np.float32),
        }
    else:
        assert names == ["observations"] and obs_keys == ["ep0000/agent/obs"]
        feeds = {"observations": data["ep0000/agent/obs"].astype(np.float32)}
    continuous = name == "pendulum"
    assert [o.name for o in session.get_outputs()] == ["means" if continuous else "logits"]
    got = session.run(None, feeds)
    # The same network in torch, loaded independently of the exporter's session.
    policy = policy_nets(load(locate(trained[name]).checkpoint))["default_policy"]
    with torch.no_grad():
        want = [t.numpy() for t in policy(*[torch.from_numpy(feeds[n]) for n in names])]
    if continuous:
        np.testing.assert_allclose(got[0], want[0], atol=1e-5)
    else:
        assert (got[0].argmax(-1) == want[0].argmax(-1)).all()
    # Greedy actions from the ONNX model are the ones the rollout took (same connectors; continuous
    # ones mapped to the action bounds as RLlib's normalize_actions does).
    (chosen,) = greedy(got, policy.layout)
    taken = data["ep0000/agent/actions"]
    np.testing.assert_allclose(chosen[:-1].reshape(taken.shape), taken, atol=1e-5)


def copy_checkpoint(src_experiment: Path, dst: Path) -> Path:
    from envsdk.training.run.checkpoints import locate

    ckpt = locate(src_experiment).checkpoint
    return Path(shutil.copytree(ckpt, dst / ckpt.name))


def test_damaged_checkpoint_is_refused(trained, tmp_path):
    ckpt = copy_checkpoint(trained["cartpole"], tmp_path)
    state = ckpt / internals.MODULE_DIR / "default_policy" / internals.MODULE_STATE_FILE
    state.write_bytes(state.read_bytes()[:100])
    out = rollout_here(ckpt, "--episodes", "1")
    assert out.returncode == 2
    assert "damaged checkpoint" in out.stderr and "(truncated)" in out.stderr
    assert not episodes(out.stdout) and "Traceback" not in out.stderr


def test_a_checkpoint_of_a_newer_format_is_refused_with_the_version_that_wrote_it(trained, tmp_path):
    from envsdk.training.run.checkpoints import FORMAT, MANIFEST

    ckpt = copy_checkpoint(trained["cartpole"], tmp_path)
    manifest = json.loads((ckpt / MANIFEST).read_text())
    assert manifest["format"] == FORMAT and manifest["envsdk_version"] == envsdk.__version__
    manifest.update(format=FORMAT + 1, envsdk_version="9.0.0")
    (ckpt / MANIFEST).write_text(json.dumps(manifest))
    out = rollout_here(ckpt, "--episodes", "1")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    error, fix = [ln for ln in out.stderr.splitlines() if not ln.startswith("notice:")]
    assert f"written by envsdk 9.0.0 in checkpoint format {FORMAT + 1}" in error
    assert fix.startswith("  fix: install envsdk 9.0.0 or newer")


def test_interrupted_checkpoint_is_skipped_in_a_trial(trained, tmp_path):
    trial = next(p.parent for p in trained["cartpole"].glob("*/progress.csv"))
    copy = Path(shutil.copytree(trial, tmp_path / trial.name))
    (copy / "checkpoint_000002" / "envsdk_checkpoint.json").unlink()  # as if killed mid-copy
    out = rollout_here(copy, "--episodes", "1", "--no-out")
    assert out.returncode == 0, out.stderr
    assert checkpoint_of(out.stdout).name == "checkpoint_000001"


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("not-a-checkpoint", "no checkpoint in"),
        ("run-mismatch", "--run: DQN does not match the checkpoint, which was trained with PPO"),
        ("ray-version", "was written by Ray 1.9.0"),
        ("missing-env-module", "multi_agent_env"),
        ("episodes-and-steps", "--episodes and --steps both given"),
        ("bad-out", "the experience file is a NumPy .npz archive"),
    ],
)
def test_bad_input_exits_2(trained, tmp_path, case, message):
    from envsdk.training.run.checkpoints import read_manifest, write_manifest

    path, extra = trained["cartpole"], []
    if case == "not-a-checkpoint":
        path = tmp_path
    elif case == "run-mismatch":
        extra = ["--run", "DQN"]
    elif case == "ray-version":
        path = copy_checkpoint(trained["cartpole"], tmp_path)
        marker = path / internals.CHECKPOINT_MARKER
        marker.write_text(marker.read_text().replace('"2.60.0"', '"1.9.0"'))
        manifest = read_manifest(path)
        write_manifest(path, manifest["run"], manifest["result"])
    elif case == "missing-env-module":
        path = copy_checkpoint(trained["multi"], tmp_path)
        run = read_manifest(path)["run"]
        spec = {**run["experiment_spec"], "source": None}
        moved = {"search_paths": [str(tmp_path)], "experiment_spec": spec}
        write_manifest(path, {**run, **moved}, read_manifest(path)["result"])
    elif case == "episodes-and-steps":
        extra = ["--episodes", "1", "--steps", "10"]
    elif case == "bad-out":
        extra = ["--out", "rollouts.csv"]
    out = rollout_process(path, *extra, cwd=tmp_path)  # a fresh interpreter: no env module imported
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) <= 3


@pytest.mark.parametrize("name", ["rollouts", "rollouts.pkl"])
def test_out_without_npz_suffix_writes_npz_and_says_so(trained, tmp_path, name):
    out = rollout_here(trained["cartpole"], "--episodes", "1", "--out", name, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"--out {name}: writing rollouts.npz" in out.stderr
    assert (tmp_path / "rollouts.npz").is_file() and not (tmp_path / name).exists()


def test_envsdk_command_evaluates_and_exports(trained, tmp_path):
    """``envsdk evaluate`` takes rllib evaluate's flags; ``envsdk export`` writes the ONNX file."""
    command = [sys.executable, "-m", "envsdk"]
    evaluated = subprocess.run(
        [*command, "evaluate", str(trained["cartpole"]), "--steps", "60", "--no-render", "--no-out"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert evaluated.returncode == 0, evaluated.stderr
    assert sum(n for _, n, _ in episodes(evaluated.stdout)) == 60
    exported = subprocess.run(
        [*command, "export", str(trained["cartpole"]), str(tmp_path / "p.onnx")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "p.onnx").stat().st_size > 0 and "checked against torch" in exported.stdout
