"""Torch threads of an in-process trial: torch's default (one per core) against the trial's CPUs.

train.py gives a trial that trains in its own process as many torch threads
as the CPUs RLlib asks for its main process (what Ray's OMP_NUM_THREADS gives
a Tune trial).  This times ``configs/pendulum-sac.yaml`` (one update per env
step: the learner is most of the work) both ways, on an idle machine and
beside a busy neighbour (another process running torch on every core, as a
second trial or a job on the same node would), in env steps per second over
a few iterations.  Appends a table to benchmarks/RESULTS.md.

    python benchmarks/threads.py [--iterations 4] [--repeats 2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, env_steps_per_second, machine

CONFIG = ROOT / "configs" / "pendulum-sac.yaml"


def one_run(threads: int | None, iterations: int) -> None:
    """Runs in a fresh interpreter: env steps per second of ``iterations`` iterations, as one JSON line."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    rate = env_steps_per_second(
        CONFIG, {"num_steps_sampled_before_learning_starts": 100}, iterations=iterations
    )
    print(json.dumps({"rate": rate, "threads": torch.get_num_threads()}))


def neighbour() -> None:
    """Runs in a fresh interpreter: torch matrix products on every core until killed."""
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    a = torch.randn(512, 512)
    while True:
        a = torch.tanh(a @ a) * 0.5


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=4, help="iterations of 100 env steps timed per run")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--one-run", nargs=2, type=int, help=argparse.SUPPRESS)
    p.add_argument("--neighbour", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.neighbour:
        neighbour()
        return
    if args.one_run:
        threads, iterations = args.one_run
        one_run(threads or None, iterations)
        return

    environ = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}

    def child(threads: int) -> dict:
        out = subprocess.run(
            [sys.executable, __file__, "--one-run", str(threads), str(args.iterations)],
            capture_output=True, text=True, cwd=ROOT, env=environ,
        )  # fmt: skip
        if out.returncode != 0:
            raise SystemExit(out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])

    cases = {"idle": None, "beside a busy neighbour": "neighbour"}
    rates: dict[tuple[str, str], list[float]] = {}
    names = {0: "torch's default", 1: "the trial's CPUs (1)"}
    default_threads = 0
    for situation, load in cases.items():
        other = (
            subprocess.Popen([sys.executable, __file__, "--neighbour"], cwd=ROOT)
            if load is not None
            else None
        )
        try:
            for _ in range(args.repeats):
                for threads in (0, 1):  # alternate, so that drift hits both alike
                    run = child(threads)
                    default_threads = run["threads"] if threads == 0 else default_threads
                    rates.setdefault((situation, names[threads]), []).append(run["rate"])
        finally:
            if other is not None:
                other.kill()
                other.wait()
    lines = [
        f"### threads: torch threads of an in-process trial, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/threads.py --iterations {args.iterations} --repeats "
        f"{args.repeats}`: configs/pendulum-sac.yaml (one update per env step) in one process, env steps "
        f"per second over {args.iterations} iterations after the first two (each timed step makes an "
        f"update); torch's default here is {default_threads} threads; the neighbour is a process running "
        "torch matrix products on every core.",
        "",
        "| situation | torch threads | runs (env steps/s) | median |",
        "|---|---|---|---|",
    ]
    for (situation, threads), values in rates.items():
        runs = ", ".join(f"{v:.1f}" for v in values)
        lines.append(f"| {situation} | {threads} | {runs} | {statistics.median(values):.1f} |")
    append_results(lines)


if __name__ == "__main__":
    main()
