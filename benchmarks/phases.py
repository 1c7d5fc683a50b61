"""Where the fixed seconds of a short run go: configs/cartpole-ppo.yaml's in-process path, phase by phase.

Times, in one process, the path train.py takes for a single trial that runs
entirely in its own process (no Ray started): importing RLlib's PPO,
``build_config`` (YAML checks, env preflight, module check), building the
algorithm, three training iterations and ``algo.stop``.  For comparison, a
second process times what a run that needs Ray (remote env runners, Tune
trials) pays on top: ``ray.init`` of a local Ray and its shut-down.
Appends a table to benchmarks/RESULTS.md.

    python benchmarks/phases.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

PHASES = ["import RLlib's PPO", "build_config", "build_algo", "3 iterations", "algo.stop"]


def one_run() -> None:
    """Runs in a fresh interpreter: print the phases' seconds as one JSON line."""
    marks = [time.perf_counter()]
    from ray.rllib.algorithms.ppo import PPOConfig  # noqa: F401

    marks.append(time.perf_counter())
    from envsdk.config.experiment import load_experiments
    from envsdk.internals import without_object_store
    from envsdk.training.build import build_config

    built = build_config(load_experiments(ROOT / "configs" / "cartpole-ppo.yaml")[0])
    marks.append(time.perf_counter())
    with without_object_store():
        algo = built.config.build_algo()
        marks.append(time.perf_counter())
        for _ in range(3):
            algo.train()
        marks.append(time.perf_counter())
        algo.stop()
    marks.append(time.perf_counter())
    print(json.dumps([b - a for a, b in itertools.pairwise(marks)]))


def ray_start_stop() -> None:
    """Runs in a fresh interpreter: ray.init and shut-down as train.py does them when a run needs Ray."""
    import ray

    from envsdk.cluster.ray_session import start_ray, stop_ray

    start = time.perf_counter()
    start_ray(num_cpus=2)
    started = time.perf_counter()
    stop_ray()
    print(json.dumps([started - start, time.perf_counter() - started, ray.is_initialized()]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--ray-start-stop", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_run:
        one_run()
        return
    if args.ray_start_stop:
        ray_start_stop()
        return

    def child(flag: str) -> tuple[list[float], float]:
        start = time.perf_counter()
        out = subprocess.run([sys.executable, __file__, flag], capture_output=True, text=True, cwd=ROOT)
        wall = time.perf_counter() - start
        return json.loads(out.stdout.strip().splitlines()[-1]), wall

    runs = []
    for _ in range(args.repeats):
        phases, wall = child("--one-run")
        runs.append([*phases, wall])
    ray_runs = [child("--ray-start-stop")[0] for _ in range(args.repeats)]
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import stable_baselines3, torch"], check=True)
    sb3 = time.perf_counter() - start
    lines = [
        f"### phases: where the fixed seconds of configs/cartpole-ppo.yaml go, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/phases.py --repeats {args.repeats}`. The path train.py "
        "takes for one trial with nothing outside its process: no Ray is started.",
        "",
        "| phase | " + " | ".join(f"run {i + 1} (s)" for i in range(len(runs))) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for i, name in enumerate([*PHASES, "whole process"]):
        lines.append(f"| {name} | " + " | ".join(f"{r[i]:.2f}" for r in runs) + " |")
    inits = ", ".join(f"{r[0]:.2f} + {r[1]:.2f}" for r in ray_runs)
    lines += [
        "",
        f"A run that needs Ray (remote env runners or learners, a Tune trial) also pays a local "
        f"`ray.init` + shut-down: {inits} s.",
        f"For comparison, a process that only imports stable_baselines3 and torch: {sb3:.2f} s.",
    ]
    append_results(lines)


if __name__ == "__main__":
    main()
