"""Time-to-solve on CartPole-v1: our train.py against Stable-Baselines3, in one run.

For each seed, two whole processes are timed from launch to exit:

* ours: ``python train.py -f configs/cartpole-ppo.yaml --seed S`` (Python,
  imports, Ray start-up and shut-down included), episode returns averaged
  over the last 20 episodes (``metrics_num_episodes_for_smoothing: 20``);
* SB3: PPO with RL Zoo's CartPole-v1 hyperparameters (8 envs, n_steps 32,
  batch 256, 20 epochs, gamma 0.98, GAE 0.8, linear lr 1e-3 and clip 0.2),
  stopped by a callback once the last 20 episodes average the target.

Both stop at a mean return of 475 over the last 20 episodes or at the time
cap.  Prints a table with the our/SB3 ratios, appends it to
benchmarks/RESULTS.md and writes benchmarks/solve_cartpole.png (return
against wall time, both tools).  SB3 is a benchmark-only dependency
(``pip install -e '.[bench]'``; ``make bench`` does it).

    python benchmarks/solve_cartpole.py [--seeds 1 2 3] [--cap 300] [--skip-sb3]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

TARGET, WINDOW = 475.0, 20
CONFIG = "configs/cartpole-ppo.yaml"


def run_ours(seed: int, cap: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable, str(ROOT / "train.py"), "-f", CONFIG, "--seed", str(seed), "--local-dir", tmp,
                "--stop-time", str(cap), f"--config.metrics_num_episodes_for_smoothing={WINDOW}",
            ],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        wall = time.perf_counter() - start
        progress = next(Path(tmp).glob("*/*/progress.csv"), None)
        rows = list(csv.DictReader(progress.open())) if progress else []
    curve = [(float(r["time_total_s"]), float(r["env_runners/episode_return_mean"] or "nan")) for r in rows]
    solved = [r for r in rows if float(r["env_runners/episode_return_mean"] or 0) >= TARGET]
    # Time outside training (start-up, shut-down) shifts the curve onto the process's clock.
    offset = wall - (curve[-1][0] if curve else 0)
    return {
        "tool": "ours", "seed": seed, "wall": wall, "solved": bool(solved), "rc": proc.returncode,
        "steps": int(float(solved[0]["num_env_steps_sampled_lifetime"])) if solved else None,
        "curve": [(t + offset, r) for t, r in curve],
    }  # fmt: skip


def run_sb3(seed: int, cap: float) -> dict:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, __file__, "--sb3-worker", str(seed), "--cap", str(cap)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"SB3 run failed (pip install -e '.[bench]'?):\n{proc.stderr[-2000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    offset = wall - report["exit_at"]
    return {
        "tool": "sb3", "seed": seed, "wall": wall, "solved": report["solved"], "rc": 0,
        "steps": report["steps"] if report["solved"] else None,
        "curve": [(t + offset, r) for t, r in report["curve"]],
    }  # fmt: skip


def sb3_worker(seed: int, cap: float) -> None:
    """Runs inside the SB3 subprocess: train until solved or the cap, print one JSON line."""
    t0 = time.perf_counter()
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    class Stop(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[float, float]] = []
            self.solved = False

        def _on_rollout_end(self) -> None:
            returns = [ep["r"] for ep in list(self.model.ep_info_buffer)[-WINDOW:]]
            if returns:
                self.curve.append((time.perf_counter() - t0, sum(returns) / len(returns)))

        def _on_step(self) -> bool:
            returns = [ep["r"] for ep in list(self.model.ep_info_buffer)[-WINDOW:]]
            self.solved = len(returns) == WINDOW and sum(returns) / WINDOW >= TARGET
            return not self.solved and time.perf_counter() - t0 < cap

    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = PPO(
        "MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20, ent_coef=0.0,
        learning_rate=lambda left: left * 1e-3, clip_range=lambda left: left * 0.2, seed=seed, device="cpu",
    )  # fmt: skip
    stop = Stop()
    model.learn(total_timesteps=1_000_000, callback=stop)
    curve = [*stop.curve, (time.perf_counter() - t0, stop.curve[-1][1] if stop.curve else 0.0)]
    print(json.dumps({"solved": stop.solved, "steps": model.num_timesteps, "curve": curve,
                      "exit_at": time.perf_counter() - t0}))  # fmt: skip


def plot(runs: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    colors = {"ours": "tab:blue", "sb3": "tab:orange"}
    for run in runs:
        label = f"{'train.py' if run['tool'] == 'ours' else 'SB3 PPO'} seed {run['seed']}"
        ax.plot([t for t, _ in run["curve"]], [r for _, r in run["curve"]], color=colors[run["tool"]],
                alpha=0.8, label=label)  # fmt: skip
    ax.axhline(TARGET, color="grey", ls="--", lw=1)
    ax.set_xlabel("wall time since the process started (s)")
    ax.set_ylabel(f"mean return, last {WINDOW} episodes")
    ax.set_title("CartPole-v1: configs/cartpole-ppo.yaml vs SB3 PPO (RL Zoo settings)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r["solved"]]
    return statistics.median(values) if values else None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--cap", type=float, default=300, help="time cap per run (s)")
    p.add_argument("--skip-sb3", action="store_true")
    p.add_argument("--sb3-worker", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sb3_worker is not None:
        sb3_worker(args.sb3_worker, args.cap)
        return
    runs = []
    for seed in args.seeds:
        for tool, run_fn in (("ours", run_ours), ("sb3", run_sb3)):
            if tool == "sb3" and args.skip_sb3:
                continue
            print(f"{tool} seed {seed} ...", end=" ", flush=True)
            run = run_fn(seed, args.cap)
            runs.append(run)
            state = "solved" if run["solved"] else "NOT solved"
            print(f"{state} in {run['wall']:.1f} s, {run['steps'] or '-'} steps")
    lines = [
        f"### solve_cartpole: {CONFIG} vs Stable-Baselines3, {datetime.date.today()}",
        f"Machine: {machine()}. "
        f"`python benchmarks/solve_cartpole.py --seeds {' '.join(map(str, args.seeds))}`. "
        f"Criterion for both: mean return over the last {WINDOW} episodes >= {TARGET:g}; wall time is the "
        "whole process from launch to exit (ours: Python, imports, Ray start-up and shut-down included; "
        "SB3: Python and imports).",
        "",
        "| seed | ours: wall (s) | ours: env steps | SB3: wall (s) | SB3: env steps | wall ratio ours/SB3 |",
        "|---|---|---|---|---|---|",
    ]
    for seed in args.seeds:
        ours = next(r for r in runs if r["seed"] == seed and r["tool"] == "ours")
        sb3 = next((r for r in runs if r["seed"] == seed and r["tool"] == "sb3"), None)

        def cell(r: dict | None, key: str) -> str:
            if r is None:
                return "-"
            value = r[key] if r["solved"] else None
            return "not solved" if value is None else (f"{value:.1f}" if key == "wall" else f"{value}")

        ratio = f"{ours['wall'] / sb3['wall']:.2f}" if sb3 and ours["solved"] and sb3["solved"] else "-"
        lines.append(
            f"| {seed} | {cell(ours, 'wall')} | {cell(ours, 'steps')} | {cell(sb3, 'wall')} | "
            f"{cell(sb3, 'steps')} | {ratio} |"
        )
    mine = [r for r in runs if r["tool"] == "ours"]
    theirs = [r for r in runs if r["tool"] == "sb3"]
    m_ours, m_sb3 = _median(mine, "wall"), _median(theirs, "wall")
    summary = f"\nMedian wall time: ours {m_ours:.1f} s" if m_ours else "\nours: not solved"
    if m_sb3:
        summary += f", SB3 {m_sb3:.1f} s"
        if m_ours:
            summary += f"; ratio of medians ours/SB3 = {m_ours / m_sb3:.2f} (target <= 1.0)"
    lines.append(summary + ". Plot: benchmarks/solve_cartpole.png")
    append_results(lines)
    plot(runs, ROOT / "benchmarks" / "solve_cartpole.png")


if __name__ == "__main__":
    main()
