"""The SLURM launcher against a real single-host Slurm (slurmctld + slurmd + munge from Debian).

One real node runs the one-node script to completion (SIGTERM, checkpoint,
requeue, resume).  Multi-node and heterogeneous scripts cannot run on one
host (Debian's Slurm is built without multiple-slurmd support), so they are
checked with ``sbatch --test-only`` against the same controller, which knows
three more (ghost) nodes in a partition of their own, one with a GPU.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import ROOT, free_port, progress_rows, trial_dirs

BINARIES = ("slurmctld", "slurmd", "sbatch", "munged")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(shutil.which(b) is None and not Path(f"/usr/sbin/{b}").exists() for b in BINARIES)
        or os.geteuid() != 0,
        reason="needs Slurm and munge from Debian (`make test` installs them when run as root)",
    ),
]


def _slurm(*args: str, conf: Path, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURM_CONF": str(conf)}
    return subprocess.run(list(args), capture_output=True, text=True, env=env, check=check, timeout=120)


@pytest.fixture(scope="module")
def munge_socket():
    """A private munged with its own key and socket.

    The system one cannot be trusted: Debian's package starts it at install
    time, and in a container it is gone later while its socket file stays.
    munged wants every directory above its socket searchable by all, so this
    lives under /tmp rather than pytest's 0700 temp folder.
    """
    base = Path(tempfile.mkdtemp(prefix="envsdk-munge-"))
    base.chmod(0o755)
    private = base / "etc"
    private.mkdir(mode=0o700)
    key = private / "munge.key"
    key.write_bytes(os.urandom(128))
    key.chmod(0o600)
    socket_path = base / "munge.socket"
    subprocess.run(
        [
            "/usr/sbin/munged", f"--socket={socket_path}", f"--key-file={key}",
            f"--log-file={private / 'munged.log'}", f"--pid-file={private / 'munged.pid'}",
            f"--seed-file={private / 'munged.seed'}",
        ],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip
    yield socket_path
    with contextlib.suppress(OSError, ValueError):
        os.kill(int((private / "munged.pid").read_text()), signal.SIGTERM)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def slurm(tmp_path_factory, munge_socket):
    base = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log"):
        (base / sub).mkdir()
    host = socket.gethostname()
    conf = base / "slurm.conf"
    conf.write_text(
        f"""ClusterName=envsdk-test
SlurmctldHost={host}
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={munge_socket}
GresTypes=gpu
StateSaveLocation={base}/state
SlurmdSpoolDir={base}/spool
SlurmctldPidFile={base}/slurmctld.pid
SlurmdPidFile={base}/slurmd.pid
SlurmctldLogFile={base}/log/slurmctld.log
SlurmdLogFile={base}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
NodeName={host} CPUs={os.cpu_count()} RealMemory=4000 State=UNKNOWN
NodeName=ghost[1-2] NodeAddr=127.0.0.2 NodeHostname=ghost CPUs=2 RealMemory=4000 State=DOWN
NodeName=ghostgpu NodeAddr=127.0.0.2 NodeHostname=ghost CPUs=2 RealMemory=4000 Gres=gpu:1 State=DOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
PartitionName=cluster Nodes=ALL MaxTime=INFINITE State=UP
"""
    )
    _slurm("slurmctld", "-c", "-f", str(conf), conf=conf)
    _slurm("slurmd", "-f", str(conf), conf=conf)
    # Every node idle: the ghosts' address is on the loopback, where this host's slurmd answers the
    # controller's ping, so they return to service a few seconds after the start (ReturnToService=2).
    # An sbatch --test-only during that change was refused ("Requested node configuration is not
    # available") on a loaded machine.
    deadline = time.time() + 60
    while set(_slurm("sinfo", "-h", "-N", "-o", "%t", conf=conf, check=False).stdout.split()) != {"idle"}:
        assert time.time() < deadline, (base / "log" / "slurmctld.log").read_text()[-2000:]
        time.sleep(1)
    yield conf
    for pidfile in ("slurmd.pid", "slurmctld.pid"):
        with contextlib.suppress(OSError, ValueError):
            os.kill(int((base / pidfile).read_text()), signal.SIGTERM)


def _script(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "job.sbatch"
    gen = subprocess.run(
        [sys.executable, "-m", "envsdk", "slurm", "-o", str(out), *args], capture_output=True, text=True
    )
    assert gen.returncode == 0, gen.stderr
    return out


@pytest.mark.parametrize(
    "shape",
    [
        ["--cpus-per-node", "2"],
        ["--nodes", "3", "--cpus-per-node", "2"],
        ["--rollout-nodes", "2", "--gpu-nodes", "1", "--gpus-per-node", "1", "--cpus-per-node", "2"],
    ],
    ids=["one-node", "multi-node", "heterogeneous"],
)
def test_scripts_are_accepted_by_sbatch(slurm, tmp_path, shape):
    partition = "debug" if len(shape) == 2 else "cluster"
    script = _script(
        tmp_path, *shape, "--partition", partition, "--requeue", "--", "-f", "configs/cartpole-ppo.yaml"
    )
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr
    out = _slurm("sbatch", "--test-only", str(script), conf=slurm, check=False)
    assert out.returncode == 0 and "to start at" in out.stderr, out.stderr


def test_one_node_job_checkpoints_requeues_and_resumes(slurm, tmp_path):
    results, log = tmp_path / "results", tmp_path / "job-%j.out"
    script = _script(
        tmp_path, "--cpus-per-node", "2", "--requeue", "--output", str(log),
        "--env-setup", f"export PATH={Path(sys.executable).parent}:$PATH",
        "--", "-f", "configs/cartpole-ppo.yaml", "--stop-iters", "10", "--stop-reward", "1000",
        "--local-dir", str(results),
    )  # fmt: skip
    job = _slurm(
        "sbatch", "--parsable", "-p", "debug", "--chdir", str(ROOT), str(script), conf=slurm
    ).stdout.strip()
    deadline = time.time() + 240
    while not (trial_dirs(results) and len(progress_rows(trial_dirs(results)[0])) >= 2):
        assert time.time() < deadline, "the job did not start training"
        time.sleep(0.5)
    _slurm("scancel", "--signal=TERM", "--batch", job, conf=slurm)  # what --signal=B:TERM@N sends
    job_log = Path(str(log).replace("%j", job))
    # Only once the first run has fully ended (PENDING, not REQUEUED or COMPLETING) may the next start:
    # started earlier, the old run's end can be booked against the new one on a slow machine.
    while not {"Restarts=1", "JobState=PENDING"} <= set(
        _slurm("scontrol", "show", "job", job, conf=slurm).stdout.split()
    ):
        assert time.time() < deadline, f"the job was not requeued:\n{job_log.read_text()[-3000:]}"
        time.sleep(1)
    # Skip Slurm's requeue delay, but only once the node has finished cleaning up after the first run:
    # started while slurmd still completes the old one, the launch itself fails (FAILED, RunTime 0).
    while "State=IDLE " not in _slurm("scontrol", "show", "node", conf=slurm).stdout + " ":
        assert time.time() < deadline + 120, _slurm("scontrol", "show", "node", conf=slurm).stdout
        time.sleep(1)
    time.sleep(2)
    _slurm("scontrol", "update", f"JobId={job}", "StartTime=now", conf=slurm)
    while "JobState=COMPLETED" not in (state := _slurm("scontrol", "show", "job", job, conf=slurm).stdout):
        assert "FAILED" not in state and time.time() < deadline + 240, state + job_log.read_text()[-3000:]
        time.sleep(1)
    text = job_log.read_text()
    assert "stopped by SIGTERM" in text and "requeueing job" in text and "done: cartpole-ppo" in text
    (trial,) = trial_dirs(results)  # the requeued run went on in the same trial
    assert [int(r["training_iteration"]) for r in progress_rows(trial)] == list(range(1, 11))


def test_launcher_mistakes_exit_2(tmp_path):
    for args, message in (
        ([], "no train.py arguments"),
        (
            ["--rollout-nodes", "2", "--", "-f", "x.yaml"],
            "needs --rollout-nodes, --gpu-nodes and --gpus-per-node",
        ),
    ):
        out = subprocess.run([sys.executable, "-m", "envsdk", "slurm", *args], capture_output=True, text=True)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr
