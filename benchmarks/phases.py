"""Where the fixed seconds of a short run go: configs/cartpole-ppo.yaml's in-process path, phase by phase.

Times, in one process: importing Ray and RLlib's PPO, ``ray.init`` (local, no
dashboard), ``build_config`` (YAML checks, env preflight, module check),
``build_algo``, three training iterations, and ``algo.stop`` + ``ray.shutdown``.
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

PHASES = ["import ray + PPO", "ray.init", "build_config", "build_algo", "3 iterations", "stop + shutdown"]


def one_run() -> None:
    """Runs in a fresh interpreter: print the phases' seconds as one JSON line."""
    marks = [time.perf_counter()]
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig  # noqa: F401

    marks.append(time.perf_counter())
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    marks.append(time.perf_counter())
    from envsdk.config.experiment import load_experiments
    from envsdk.training.algorithm_config import build_config

    built = build_config(load_experiments(ROOT / "configs" / "cartpole-ppo.yaml")[0])
    marks.append(time.perf_counter())
    algo = built.config.build_algo()
    marks.append(time.perf_counter())
    for _ in range(3):
        algo.train()
    marks.append(time.perf_counter())
    algo.stop()
    ray.shutdown()
    marks.append(time.perf_counter())
    print(json.dumps([b - a for a, b in itertools.pairwise(marks)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--one-run", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_run:
        one_run()
        return
    runs = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, __file__, "--one-run"], capture_output=True, text=True, cwd=ROOT
        )
        wall = time.perf_counter() - start
        runs.append([*json.loads(out.stdout.strip().splitlines()[-1]), wall])
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import stable_baselines3, torch"], check=True)
    sb3 = time.perf_counter() - start
    lines = [
        f"### phases: where the fixed seconds of configs/cartpole-ppo.yaml go, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/phases.py --repeats {args.repeats}`.",
        "",
        "| phase | " + " | ".join(f"run {i + 1} (s)" for i in range(len(runs))) + " |",
        "|---|" + "---|" * len(runs),
    ]
    for i, name in enumerate([*PHASES, "whole process"]):
        lines.append(f"| {name} | " + " | ".join(f"{r[i]:.2f}" for r in runs) + " |")
    lines.append(f"\nFor comparison, a process that only imports stable_baselines3 and torch: {sb3:.2f} s.")
    append_results(lines)


if __name__ == "__main__":
    main()
