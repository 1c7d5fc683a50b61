"""Env steps to solve a config's task under variants of its settings, over many seeds.

The sweep behind a tuned config's comment: each variant is the config with
some ``config:`` keys overridden (``KEY=VALUE``, given to train.py as
``--config.KEY=VALUE``), trained by whole ``train.py`` processes until the
mean return of the last 20 episodes reaches ``--target``
(solve_suite.py's runs and check).  Env steps to solve do not depend on the
machine's load for a given seed, so ``--jobs 2`` runs two at a time; the
wall times reported then are rough, and solve_suite.py is what times a config.

    python benchmarks/steps_to_solve.py --seeds 1 2 3 4 5 6 7 8 \\
        --variant "2x512, 15 epochs, lr 3e-3" minibatch_size=512 num_epochs=15 lr=0.003
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_results, machine
from solve_suite import WINDOW, Task, run_ours

CAP = 600  # seconds a run may take, by default (a CartPole-sized task)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/cartpole-ppo.yaml")
    p.add_argument("--target", type=float, default=475.0, help="mean return of the last 20 episodes")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 9)))
    p.add_argument("--max-steps", type=int, default=150_000, help="a run that has not solved by then stops")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--cap", type=float, default=CAP, help="seconds a run may take (LunarLander: 3600)")
    p.add_argument(
        "--variant", nargs="+", action="append", default=[], metavar=("NAME", "KEY=VALUE"),
        help="a name and config overrides; the config as it is always runs first",
    )  # fmt: skip
    args = p.parse_args()
    task = Task(Path(args.config).stem, args.target, args.config, len(args.seeds), args.cap, algo="-")
    limit = ["--stop-timesteps", str(args.max_steps)]
    variants = {"as in the file": [], **{v[0]: v[1:] for v in args.variant}}
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {
            (name, seed): pool.submit(
                run_ours, task, seed, args.cap, [*limit, *(f"--config.{o}" for o in overrides)]
            )
            for name, overrides in variants.items()
            for seed in args.seeds
        }
        for (name, seed), future in futures.items():
            run = future.result()
            if run["rc"] != 0 or run["steps"] is None:
                raise SystemExit(f"train.py failed ({name}, seed {seed}); its error is above")
            print(f"{name} seed {seed}: {run['steps']} steps{'' if run['solved'] else ' (not solved)'}")
    lines = [
        f"### steps_to_solve: {args.config} under variants, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/steps_to_solve.py --config {args.config} --seeds "
        f"{' '.join(map(str, args.seeds))} ...`. Env steps until the mean return of the last {WINDOW} "
        f"episodes reached {args.target:g} (a run that did not by {args.max_steps:,} steps counts with "
        f"those); whole-process wall times with {args.jobs} runs at a time.",
        "",
        "| variant | overrides | median env steps | min-max | not solved | median wall (s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, overrides in variants.items():
        runs = [futures[name, seed].result() for seed in args.seeds]
        steps = [r["steps"] for r in runs]
        lines.append(
            f"| {name} | {' '.join(overrides) or '-'} | {statistics.median(steps):,.0f} | "
            f"{min(steps):,}-{max(steps):,} | {sum(not r['solved'] for r in runs)} | "
            f"{statistics.median(r['wall'] for r in runs):.1f} |"
        )
    append_results(lines)


if __name__ == "__main__":
    main()
