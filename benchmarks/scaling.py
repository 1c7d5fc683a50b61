"""Env steps per second against the number of env runners.

Each point runs ``python train.py -f configs/cartpole-ppo.yaml`` with
``--num-workers N`` on a local Ray of N + 1 CPUs, a fixed train batch of
4000 steps and 6 iterations, and takes the median over iterations 2-6 of
(env steps sampled / iteration time).  Default runner counts: 1 up to the
machine's cores less one (at least 1 and 2).  Writes a table into
benchmarks/RESULTS.md and benchmarks/scaling.png.

    python benchmarks/scaling.py [--runners 1 2 4 8 15]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

BATCH, ITERS = 4000, 6


def measure(runners: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run(
            [
                sys.executable, str(ROOT / "train.py"), "-f", "configs/cartpole-ppo.yaml",
                "--num-workers", str(runners), "--ray-num-cpus", str(runners + 1),
                "--stop-iters", str(ITERS), "--stop-reward", "1e9", "--local-dir", tmp,
                f"--config.train_batch_size={BATCH}", "--config.num_envs_per_env_runner=1",
            ],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        if out.returncode != 0:
            raise SystemExit(f"train.py failed with {runners} runner(s):\n{out.stderr[-2000:]}")
        progress = next(Path(tmp).glob("*/*/progress.csv"))
        rows = list(csv.DictReader(progress.open()))
    rates = [float(r["env_runners/num_env_steps_sampled"]) / float(r["time_this_iter_s"]) for r in rows[1:]]
    return statistics.median(rates)


def plot(points: list[tuple[int, float]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs, ys = zip(*points, strict=True)
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ax.plot(xs, ys, "o-", label="measured")
    ax.plot(xs, [ys[0] * x / xs[0] for x in xs], "--", color="gray", label="linear from the first point")
    ax.set_xlabel("env runners")
    ax.set_ylabel("env steps per second")
    ax.set_title(f"PPO CartPole-v1, batch {BATCH}, {os.cpu_count()} cores")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = sorted(
        {1, 2, *range(2, max(2, (os.cpu_count() or 2) - 1) + 1, 2), max(1, (os.cpu_count() or 2) - 1)}
    )
    p.add_argument("--runners", type=int, nargs="+", default=default)
    args = p.parse_args()
    points = []
    for n in args.runners:
        rate = measure(n)
        points.append((n, rate))
        print(f"{n} env runner(s): {rate:,.0f} env steps/s", flush=True)
    lines = [
        f"### scaling: env steps per second against env runners, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/scaling.py --runners {' '.join(map(str, args.runners))}`: "
        f"configs/cartpole-ppo.yaml, train batch {BATCH}, one env per runner, local Ray of runners + 1 CPUs; "
        f"median over iterations 2-{ITERS} of env steps sampled / iteration time (sampling and learning).",
        "",
        "| env runners | env steps/s | speed-up |",
        "|---|---|---|",
    ]
    lines += [f"| {n} | {rate:,.0f} | {rate / points[0][1]:.2f}x |" for n, rate in points]
    lines.append("\nPlot: benchmarks/scaling.png")
    append_results(lines)
    plot(points, ROOT / "benchmarks" / "scaling.png")


if __name__ == "__main__":
    main()
