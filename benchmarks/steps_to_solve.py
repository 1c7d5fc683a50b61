"""Env steps to solve a config's task under variants of its settings, over many seeds.

The sweep behind a tuned config's comment: each variant is the config with
some ``config:`` keys overridden (``--config.KEY=VALUE``, as train.py takes
them), trained by whole ``train.py`` processes until the mean return of the
last 20 episodes reaches ``--target`` (the same check as solve_suite.py).
Env steps to solve do not depend on the machine's load for a given seed, so
``--jobs 2`` runs two at a time; the training seconds reported then are
rough, and solve_suite.py is what times a config.

    python benchmarks/steps_to_solve.py --seeds 1 2 3 4 5 6 7 8 \\
        --variant "2x512, 15 epochs, lr 3e-3" minibatch_size=512 num_epochs=15 lr=0.003
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

WINDOW = 20  # episodes in the mean return, as solve_suite.py
RETURN = "env_runners/episode_return_mean"
STEPS = "num_env_steps_sampled_lifetime"


def run(
    config: str, overrides: list[str], seed: int, target: float, max_steps: int
) -> tuple[int, bool, float]:
    """(env steps, solved, training seconds) of one train.py process."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run(
            [
                sys.executable, str(ROOT / "train.py"), "-f", config, "--seed", str(seed), "--local-dir", tmp,
                "--stop-timesteps", str(max_steps), f"--config.metrics_num_episodes_for_smoothing={WINDOW}",
                *(f"--config.{o}" for o in overrides),
            ],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        progress = next(Path(tmp).glob("*/*/progress.csv"), None)
        rows = list(csv.DictReader(progress.open())) if progress else []
    if proc.returncode != 0 or not rows:
        raise SystemExit(f"train.py failed ({' '.join(overrides)}, seed {seed}):\n{proc.stderr[-2000:]}")
    solved = [r for r in rows if float(r[RETURN] or "-inf") >= target]
    row = solved[0] if solved else rows[-1]
    return int(float(row[STEPS])), bool(solved), float(row["time_total_s"])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="configs/cartpole-ppo.yaml")
    p.add_argument("--target", type=float, default=475.0, help="mean return of the last 20 episodes")
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(1, 9)))
    p.add_argument("--max-steps", type=int, default=150_000, help="a run that has not solved by then stops")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument(
        "--variant", nargs="+", action="append", default=[], metavar=("NAME", "KEY=VALUE"),
        help="a name and config overrides; the config as it is always runs first",
    )  # fmt: skip
    args = p.parse_args()
    variants = {"as in the file": [], **{v[0]: v[1:] for v in args.variant}}
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = {
            (name, seed): pool.submit(run, args.config, overrides, seed, args.target, args.max_steps)
            for name, overrides in variants.items()
            for seed in args.seeds
        }
        for (name, seed), future in futures.items():
            steps, solved, _ = future.result()
            print(f"{name} seed {seed}: {steps} steps{'' if solved else ' (not solved)'}", flush=True)
    lines = [
        f"### steps_to_solve: {args.config} under variants, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/steps_to_solve.py --config {args.config} --seeds "
        f"{' '.join(map(str, args.seeds))} ...`. Env steps until the mean return of the last {WINDOW} "
        f"episodes reached {args.target:g} (a run that did not by {args.max_steps:,} steps counts with "
        f"those); training seconds with {args.jobs} runs at a time.",
        "",
        "| variant | overrides | median env steps | min-max | not solved | median training (s) |",
        "|---|---|---|---|---|---|",
    ]
    for name, overrides in variants.items():
        runs = [futures[name, seed].result() for seed in args.seeds]
        steps = [r[0] for r in runs]
        lines.append(
            f"| {name} | {' '.join(overrides) or '-'} | {statistics.median(steps):,.0f} | "
            f"{min(steps):,}-{max(steps):,} | {sum(not r[1] for r in runs)} | "
            f"{statistics.median(r[2] for r in runs):.2f} |"
        )
    append_results(lines)


if __name__ == "__main__":
    main()
