"""Time-to-solve of configs/cartpole-ppo.yaml, measured as a user runs it.

Each seed runs ``python train.py -f configs/cartpole-ppo.yaml --seed S`` as a
whole process (Python start, Ray start, Tune and training all counted) until
RLlib's ``env_runners/episode_return_mean`` reaches 475 or the time cap.
Prints a table, appends it to benchmarks/RESULTS.md and writes
benchmarks/solve_cartpole.png (return against wall time per seed).

    python benchmarks/solve_cartpole.py [--seeds 1 2 3] [--cap 300]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

TARGET = 475.0


def run_seed(seed: int, cap: float, config: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "train.py"),
                "-f",
                config,
                "--seed",
                str(seed),
                "--local-dir",
                tmp,
                "--stop-time",
                str(cap),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        wall = time.perf_counter() - start
        progress = next(Path(tmp).glob("*/*/progress.csv"), None)
        rows = list(csv.DictReader(progress.open())) if progress else []
    curve = [(float(r["time_total_s"]), float(r["env_runners/episode_return_mean"] or "nan")) for r in rows]
    solved = [r for r in rows if float(r["env_runners/episode_return_mean"] or 0) >= TARGET]
    steps = int(float(solved[0]["num_env_steps_sampled_lifetime"])) if solved else None
    train_s = float(solved[0]["time_total_s"]) if solved else None
    return {
        "seed": seed,
        "wall": wall,
        "steps": steps,
        "train_s": train_s,
        "solved": bool(solved),
        "curve": curve,
        "rc": proc.returncode,
    }


def plot(runs: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6))
    for run in runs:
        # Time outside training (start-up and shut-down) shifts the curve right.
        offset = run["wall"] - (run["curve"][-1][0] if run["curve"] else 0)
        times = [t + offset for t, _ in run["curve"]]
        ax.plot(times, [r for _, r in run["curve"]], label=f"seed {run['seed']}")
    ax.axhline(TARGET, color="grey", ls="--", lw=1)
    ax.set_xlabel("wall time since `python train.py` (s)")
    ax.set_ylabel("episode_return_mean")
    ax.set_title("configs/cartpole-ppo.yaml on CartPole-v1")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--cap", type=float, default=300, help="training-time cap per seed (s)")
    p.add_argument("--config", default="configs/cartpole-ppo.yaml")
    args = p.parse_args()
    runs = []
    for seed in args.seeds:
        print(f"seed {seed} ...", end=" ", flush=True)
        run = run_seed(seed, args.cap, args.config)
        runs.append(run)
        print(
            f"{'solved' if run['solved'] else 'NOT solved'} in {run['wall']:.1f} s wall, "
            f"{run['steps'] or '-'} env steps"
        )
    solved = [r for r in runs if r["solved"]]
    lines = [
        f"### solve_cartpole: {args.config}, {datetime.date.today()}",
        f"Machine: {machine()}. Criterion: env_runners/episode_return_mean >= {TARGET:g}; "
        "wall time counts the whole `python train.py` process (Python, Ray and Tune start-up included).",
        "",
        "| seed | solved | wall time (s) | training time to solve (s) | env steps to solve |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        train_s = f"{r['train_s']:.1f}" if r["train_s"] else "-"
        lines.append(
            f"| {r['seed']} | {'yes' if r['solved'] else 'no'} | {r['wall']:.1f} | "
            f"{train_s} | {r['steps'] or '-'} |"
        )
    if solved:
        lines.append(
            f"\nMedian wall time {statistics.median(r['wall'] for r in solved):.1f} s, "
            f"median env steps {int(statistics.median(r['steps'] for r in solved))} "
            f"({len(solved)}/{len(runs)} seeds solved). Plot: benchmarks/solve_cartpole.png"
        )
    append_results(lines)
    plot(runs, ROOT / "benchmarks" / "solve_cartpole.png")


if __name__ == "__main__":
    main()
