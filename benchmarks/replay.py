"""DQN and SAC: env steps per second with transition replay against RLlib's own episode replay.

``run: DQN`` and ``run: SAC`` train with envsdk's subclasses of RLlib's
algorithms, which replay transitions from arrays and hand the learner its
batch (envsdk/training/off_policy.py); RLlib's own classes sample one-step
episodes and batch them in the learner connector.  This times both on the
shipped configs (``configs/pendulum-sac.yaml``: one update per env step;
``configs/cartpole-dqn.yaml``: prioritized 3-step replay), each in a fresh
process, alternating, and appends a table to benchmarks/RESULTS.md.

    python benchmarks/replay.py [--iterations 4] [--repeats 2]
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, env_steps_per_second, machine

CASES = {  # config -> (overrides: replay from the second iteration on, RLlib's class)
    "pendulum-sac.yaml": ({"num_steps_sampled_before_learning_starts": 100}, "ray.rllib.algorithms.sac:SAC"),
    "cartpole-dqn.yaml": (
        {"num_steps_sampled_before_learning_starts": 100, "min_sample_timesteps_per_iteration": 500},
        "ray.rllib.algorithms.dqn:DQN",
    ),
}
PATHS = ("transitions (envsdk)", "episodes (RLlib)")


def one_run(config: str, path: str, iterations: int) -> None:
    """Runs in a fresh interpreter: env steps per second, as one JSON line."""
    import importlib

    overrides, rllib = CASES[config]
    module, name = rllib.split(":")
    algo_class = getattr(importlib.import_module(module), name) if path == PATHS[1] else None
    rate = env_steps_per_second(ROOT / "configs" / config, overrides, algo_class, iterations)
    print(json.dumps(rate))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--one-run", nargs=2, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_run:
        one_run(*args.one_run, args.iterations)
        return
    rates: dict[tuple[str, str], list[float]] = {}
    for config in CASES:
        for _ in range(args.repeats):
            for path in PATHS:  # alternate, so that drift hits both alike
                command = [
                    sys.executable,
                    __file__,
                    "--one-run",
                    config,
                    path,
                    "--iterations",
                    str(args.iterations),
                ]
                out = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
                if out.returncode != 0:
                    raise SystemExit(out.stderr[-2000:])
                rates.setdefault((config, path), []).append(json.loads(out.stdout.strip().splitlines()[-1]))
    lines = [
        f"### replay: DQN and SAC, transition replay against RLlib's episode replay, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/replay.py --iterations {args.iterations} --repeats "
        f"{args.repeats}`: env steps per second over {args.iterations} iterations after the first two, in "
        "one process (no Ray), learning from the second iteration on.",
        "",
        "| config | replay | runs (env steps/s) | median | speed-up |",
        "|---|---|---|---|---|",
    ]
    for config in CASES:
        base = statistics.median(rates[(config, PATHS[1])])
        for path in PATHS:
            values = rates[(config, path)]
            runs = ", ".join(f"{v:.1f}" for v in values)
            median = statistics.median(values)
            lines.append(f"| {config} | {path} | {runs} | {median:.1f} | {median / base:.2f}x |")
    append_results(lines)


if __name__ == "__main__":
    main()
