"""``python -m envsdk slurm``: write an sbatch script that runs train.py on SLURM.

Three job shapes:

* ``--nodes 1`` (default): train.py starts Ray on the one node itself.
* ``--nodes N``: a Ray head on the first node, workers on the rest via srun;
  the script waits until Ray reports all N nodes (no ``sleep 10``).
* ``--rollout-nodes R --gpu-nodes G``: a heterogeneous job: head (and the
  driver) in group 0, R CPU nodes for env runners in group 1, G GPU nodes
  for the learner in group 2.

Multi-node clusters use Ray's token authentication with a secret generated
per job.  ``--requeue`` makes SLURM signal the job ``--signal-lead`` seconds
before its time limit: train.py checkpoints and the job requeues itself and
resumes.  ``python -m envsdk slurm wait ADDRESS N`` is the helper the scripts
use to wait for the cluster.

    python -m envsdk slurm --nodes 3 --cpus-per-node 36 --time 04:00:00 \\
        --account myproj --env-setup "source .venv/bin/activate" \\
        -o job.sbatch -- -f configs/cartpole-ppo.yaml --num-workers auto
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from envsdk.errors import UserError

RAY_PORT = 6379


@dataclass
class Job:
    name: str
    time: str
    nodes: int
    cpus_per_node: int
    rollout_nodes: int
    gpu_nodes: int
    gpus_per_node: int
    account: str | None
    partition: str | None
    gpu_partition: str | None
    env_setup: str | None
    requeue: bool
    signal_lead: int
    output: str
    train_args: list[str]

    @property
    def shape(self) -> str:
        if self.rollout_nodes or self.gpu_nodes:
            return "hetero"
        return "multi" if self.nodes > 1 else "single"


def _sbatch_lines(job: Job, *, partition: str | None, nodes: int, gpus: int = 0) -> list[str]:
    lines = [
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={job.cpus_per_node}",
    ]
    if gpus:
        lines.append(f"#SBATCH --gpus-per-node={gpus}")
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    return lines


def _header(job: Job) -> list[str]:
    lines = [
        "#!/bin/bash",
        f"# Written by `python -m envsdk slurm` ({job.shape} job). Submit with: sbatch {{script}}",
        f"#SBATCH --job-name={job.name}",
        f"#SBATCH --time={job.time}",
        f"#SBATCH --output={job.output}",
    ]
    if job.account:
        lines.append(f"#SBATCH --account={job.account}")
    if job.requeue:
        lines += [
            "#SBATCH --requeue",
            "#SBATCH --open-mode=append",
            f"# SIGTERM to this script {job.signal_lead} s before the time limit: checkpoint, then requeue.",
            f"#SBATCH --signal=B:TERM@{job.signal_lead}",
        ]
    if job.shape == "hetero":
        lines += _sbatch_lines(job, partition=job.partition, nodes=1)
        lines += ["#SBATCH hetjob", *_sbatch_lines(job, partition=job.partition, nodes=job.rollout_nodes)]
        gpu_partition = job.gpu_partition or job.partition
        gpu_lines = _sbatch_lines(job, partition=gpu_partition, nodes=job.gpu_nodes, gpus=job.gpus_per_node)
        lines += ["#SBATCH hetjob", *gpu_lines]
    else:
        lines += _sbatch_lines(job, partition=job.partition, nodes=job.nodes, gpus=job.gpus_per_node)
    lines += ["", "set -euo pipefail"]
    if job.env_setup:
        lines += ["# Environment (activation line given with --env-setup).", job.env_setup]
    return lines


def _ray_cluster(job: Job) -> list[str]:
    """Start the head here and the workers via srun; wait for all of them."""
    hetero = job.shape == "hetero"
    lines = [
        "",
        "# ---- Ray cluster: head on this (the batch) node, a worker on every other node ----",
        "# Ray 2 has no Redis password; token authentication keeps other users of these nodes out.",
        "export RAY_AUTH_MODE=token",
        "export RAY_AUTH_TOKEN=\"$(python -c 'import secrets; print(secrets.token_hex(32))')\"",
        "head_ip=\"$(hostname --ip-address | awk '{print $1}')\"",
        f'export RAY_ADDRESS="$head_ip:{RAY_PORT}"',
        f'ray start --head --node-ip-address="$head_ip" --port={RAY_PORT} \\',
        '    --num-cpus="$SLURM_CPUS_PER_TASK" \\',
        "    --include-dashboard=false --disable-usage-stats",
        "trap 'ray stop --force >/dev/null 2>&1 || true' EXIT",
    ]
    groups = (
        [
            ("--het-group=1", "$SLURM_JOB_NODELIST_HET_GROUP_1", 0),
            ("--het-group=2", "$SLURM_JOB_NODELIST_HET_GROUP_2", job.gpus_per_node),
        ]
        if hetero
        else [("", "$SLURM_JOB_NODELIST", job.gpus_per_node)]
    )
    total = 1 + (job.rollout_nodes + job.gpu_nodes if hetero else job.nodes - 1)
    for flag, nodelist, gpus in groups:
        skip = "" if hetero else " | tail -n +2"
        srun_flag = f"{flag} " if flag else ""
        lines += [
            f'for node in $(scontrol show hostnames "{nodelist}"{skip}); do',
            f'    srun {srun_flag}--nodes=1 --ntasks=1 -w "$node" \\',
            '        ray start --block --address="$RAY_ADDRESS" --num-cpus="$SLURM_CPUS_PER_TASK" \\',
            f"        --num-gpus={gpus} \\",
            "        --disable-usage-stats &",
            "done",
        ]
    lines += [
        f'python -m envsdk slurm wait "$RAY_ADDRESS" {total} --timeout 600  # every node joined, or exit 1',
    ]
    return lines


def _train(job: Job) -> list[str]:
    args = list(job.train_args)
    if job.shape != "single":
        args += ["--ray-address", "$RAY_ADDRESS"]
    else:
        args += ["--ray-num-cpus", "$SLURM_CPUS_PER_TASK"]
        if job.gpus_per_node:
            args += ["--ray-num-gpus", str(job.gpus_per_node)]
    if job.requeue and "--resume" not in args:
        args.append("--resume")  # nothing to resume on the first run: it starts fresh
    words = " ".join(f'"{a}"' if a.startswith("$") else shlex.quote(a) for a in args)  # "$VAR" expands
    lines = [
        "",
        "# ---- training: in the background so that this script can pass SIGTERM on ----",
        f"python train.py {words} &",
        "train_pid=$!",
        "interrupted=0",
        # Tolerant: Slurm's own SIGTERM can come after training has ended (scontrol requeue sends one),
        # and a failing kill under set -e would end this script with 1, booked as the job's exit code.
        "trap 'interrupted=1; kill -TERM \"$train_pid\" 2>/dev/null || true' TERM",
        "status=0",
        'wait "$train_pid" || status=$?',
        'if [ "$interrupted" = 1 ]; then  # the trap cut the first wait short',
        '    status=0; wait "$train_pid" || status=$?',
        "fi",
    ]
    if job.requeue:
        lines += [
            'if [ "$interrupted" = 1 ] && [ "$status" = 0 ]; then',
            '    echo "time limit near: checkpoint written; requeueing job $SLURM_JOB_ID"',
            '    scontrol requeue "$SLURM_JOB_ID"',
            "fi",
        ]
    lines.append('exit "$status"')
    return lines


def render(job: Job) -> str:
    lines = _header(job)
    if job.shape != "single":
        lines += _ray_cluster(job)
    lines += _train(job)
    return "\n".join(lines) + "\n"


def wait_for_nodes(address: str, count: int, timeout: float) -> int:
    """Block until the Ray cluster at ``address`` has ``count`` live nodes."""
    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            ray.init(address=address, logging_level=logging.ERROR, include_dashboard=False)
            break
        except ConnectionError:
            if time.monotonic() > deadline:
                print(f"no Ray head at {address} after {timeout:g} s", file=sys.stderr)
                return 1
            time.sleep(2)
    while True:
        alive = sum(1 for n in ray.nodes() if n["Alive"])
        if alive >= count:
            print(f"Ray cluster ready: {alive} node(s) at {address}")
            return 0
        if time.monotonic() > deadline:
            print(f"only {alive} of {count} Ray nodes joined within {timeout:g} s", file=sys.stderr)
            return 1
        time.sleep(2)


def parser(prog: str = "python -m envsdk slurm") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Write an sbatch script for train.py (see docs/cluster.md).",
        epilog="Everything after -- goes to train.py: -- -f configs/cartpole-ppo.yaml --num-workers auto",
    )
    p.add_argument("-o", "--out", help="write the script here (default: print it)")
    p.add_argument("--job-name", default="envsdk-train")
    p.add_argument("--time", default="01:00:00", help="wall-clock limit, HH:MM:SS")
    p.add_argument("--nodes", type=int, default=1, help="nodes for a one- or multi-node job")
    p.add_argument("--cpus-per-node", type=int, default=36)
    p.add_argument(
        "--rollout-nodes", type=int, default=0, help="heterogeneous job: CPU nodes for env runners"
    )
    p.add_argument("--gpu-nodes", type=int, default=0, help="heterogeneous job: GPU nodes for the learner")
    p.add_argument("--gpus-per-node", type=int, default=0)
    p.add_argument("--account")
    p.add_argument("--partition")
    p.add_argument("--gpu-partition", help="partition of the GPU nodes (heterogeneous job)")
    p.add_argument("--env-setup", help="shell line that activates the environment on each node")
    p.add_argument("--requeue", action="store_true", help="checkpoint before the time limit and requeue")
    p.add_argument("--signal-lead", type=int, default=300, help="seconds before the limit to signal")
    p.add_argument("--output", default="slurm-%x-%j.out", help="SLURM's log file pattern")
    return p


def main(argv: list[str], prog: str = "python -m envsdk slurm") -> int:
    if argv[:1] == ["wait"]:
        w = argparse.ArgumentParser(prog=f"{prog} wait")
        w.add_argument("address")
        w.add_argument("nodes", type=int)
        w.add_argument("--timeout", type=float, default=600)
        a = w.parse_args(argv[1:])
        return wait_for_nodes(a.address, a.nodes, a.timeout)
    own, _, train_args = (
        (argv[: argv.index("--")], "--", argv[argv.index("--") + 1 :]) if "--" in argv else (argv, "", [])
    )
    args = parser(prog).parse_args(own)
    if not train_args:
        raise UserError("no train.py arguments", "add them after --, e.g. -- -f configs/cartpole-ppo.yaml")
    if args.nodes < 1 or args.cpus_per_node < 1:
        raise UserError("--nodes and --cpus-per-node must be at least 1", "e.g. --nodes 2 --cpus-per-node 36")
    if (args.rollout_nodes or args.gpu_nodes) and (
        args.rollout_nodes < 1 or args.gpu_nodes < 1 or args.gpus_per_node < 1
    ):
        raise UserError(
            "a heterogeneous job needs --rollout-nodes, --gpu-nodes and --gpus-per-node (each at least 1)",
            "e.g. --rollout-nodes 2 --gpu-nodes 1 --gpus-per-node 2",
        )
    if (args.rollout_nodes or args.gpu_nodes) and args.nodes != 1:
        raise UserError("--nodes does not combine with --rollout-nodes/--gpu-nodes", "drop --nodes")
    job = Job(
        name=args.job_name, time=args.time, nodes=args.nodes, cpus_per_node=args.cpus_per_node,
        rollout_nodes=args.rollout_nodes, gpu_nodes=args.gpu_nodes, gpus_per_node=args.gpus_per_node,
        account=args.account, partition=args.partition, gpu_partition=args.gpu_partition,
        env_setup=args.env_setup, requeue=args.requeue, signal_lead=args.signal_lead, output=args.output,
        train_args=train_args,
    )  # fmt: skip
    script = render(job).replace("{script}", args.out or "job.sbatch")
    if args.out:
        Path(args.out).write_text(script)
        print(f"wrote {args.out} ({job.shape} job); submit it with: sbatch {args.out}")
    else:
        print(script, end="")
    return 0
