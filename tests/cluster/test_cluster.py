"""train.py joining a real two-node Ray cluster (two `ray start` processes on this machine)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import end_processes_mentioning, free_port, progress_rows, run_train, trial_dirs

pytestmark = pytest.mark.slow  # starts a two-node Ray cluster
RAY = str(Path(sys.executable).parent / "ray")
NODE_ENV = '''
import os

import gymnasium as gym
import ray


class NodeEnv(gym.Wrapper):
    """CartPole that notes which Ray node built it."""

    def __init__(self, config):
        super().__init__(gym.make("CartPole-v1"))
        if ray.is_initialized():
            where = ray.get_runtime_context().get_node_id()
            with open(os.path.join(config["out"], f"{os.getpid()}.node"), "w") as f:
                f.write(where)
'''


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _ray_start(*args: str) -> subprocess.Popen:
    common = [
        "--block", "--num-gpus=0", "--node-ip-address=127.0.0.1", "--disable-usage-stats",
        f"--dashboard-agent-listen-port={free_port()}", f"--metrics-export-port={free_port()}",
    ]  # fmt: skip
    return subprocess.Popen(
        [RAY, "start", *args, *common],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def _alive_nodes(address: str) -> int:
    probe = (
        "import ray; ray.init(address='%s', logging_level='ERROR'); "
        "print(sum(n['Alive'] for n in ray.nodes()))"
    )
    out = subprocess.run([sys.executable, "-c", probe % address], capture_output=True, text=True, timeout=60)
    return int(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else 0


@pytest.fixture(scope="module")
def two_nodes():
    port = free_port()
    address = f"127.0.0.1:{port}"
    temp = f"/tmp/envsdk-ray2-{os.getpid()}"
    head = _ray_start("--head", f"--port={port}", "--num-cpus=2", "--include-dashboard=false",
                      f"--temp-dir={temp}")  # fmt: skip
    procs = [head]
    try:
        time.sleep(5)
        procs.append(_ray_start(f"--address={address}", "--num-cpus=1"))
        deadline = time.time() + 180  # a cold first start (fresh venv, 2 cores) once took over 90 s
        while _alive_nodes(address) < 2:
            assert time.time() < deadline, "the second Ray node did not join"
            time.sleep(2)
        yield address
    finally:
        for proc in reversed(procs):
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=5)  # `ray start --block` takes 30 s on a signal
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        end_processes_mentioning(temp)


def test_env_runners_spread_over_both_nodes(two_nodes, tmp_path):
    (tmp_path / "nodeenv.py").write_text(NODE_ENV)
    marks = tmp_path / "marks"
    marks.mkdir()
    (tmp_path / "nodes.yaml").write_text(
        "nodes:\n  run: PPO\n  env: nodeenv.NodeEnv\n  stop: {training_iteration: 1}\n  config:\n"
        f"    env_config: {json.dumps({'out': str(marks)})}\n"
        "    num_env_runners: auto\n    train_batch_size: 400\n    minibatch_size: 100\n    num_epochs: 1\n"
    )
    out = run_train(
        ["-f", str(tmp_path / "nodes.yaml"), "--ray-address", two_nodes, "--local-dir", str(tmp_path / "r")],
        timeout=400,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "num_env_runners: auto -> 2" in out.stdout  # 3 CPUs less the algorithm's one
    (trial,) = trial_dirs(tmp_path / "r")
    assert progress_rows(trial)
    nodes = {p.read_text() for p in marks.glob("*.node")}
    assert len(nodes) == 2, f"env runners ran on {len(nodes)} node(s)"


def test_asking_for_gpus_the_cluster_lacks_exits_2(train):
    out = train("-f", "configs/cartpole-ppo.yaml", "--num-gpus", "1", "--stop-iters", "1")
    assert out.returncode == 2
    assert "asks for 1 GPU(s) but the Ray cluster has 0" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.skipif(_has_cuda(), reason="torch has CUDA here: a faked GPU would be used for real")
def test_faked_gpus_let_a_gpu_config_run_here(tmp_path):
    """--ray-num-gpus on a machine without CUDA: the learner is scheduled as asked and computes on the CPU."""
    out = run_train(
        [
            "-f", "configs/cartpole-ppo.yaml", "--num-gpus", "1", "--ray-num-gpus", "1",
            "--ray-num-cpus", "2", "--stop-iters", "1", "--local-dir", str(tmp_path),
        ],
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch has no CUDA here: the learner runs on the CPU" in out.stderr
    (trial,) = trial_dirs(tmp_path)
    assert len(progress_rows(trial)) == 1
