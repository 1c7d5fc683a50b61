"""Time-to-solve on a suite of tasks: our train.py against Stable-Baselines3, in one run.

For each task and seed, two whole processes are timed from launch to exit (which runs first
alternates from seed to seed):

* ours: ``python train.py -f configs/<task's config> --seed S`` (Python,
  imports included, and Ray's start-up and shut-down where the run needs Ray:
  our configs for the suite train in train.py's own process with no Ray);
* SB3: the same algorithm with RL Zoo's published hyperparameters for the
  task, in a subprocess of this script (Python and imports included).

Both stop once the mean return of the last 20 episodes reaches the task's
threshold, or at the time cap.  The script prints a table per task with the
per-seed and median ours/SB3 ratios, appends it to benchmarks/RESULTS.md and
writes benchmarks/solve_<env>.png (return against wall time, both tools).
SB3 and Box2D are benchmark-only dependencies (``pip install -e '.[bench]'``;
``make bench`` does it).

    python benchmarks/solve_suite.py [--tasks CartPole-v1 Pendulum-v1] [--seeds 1 2] [--cap 600]
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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine, run_sb3_worker

WINDOW = 20  # episodes in the mean return, for both tools
HELD_OUT = 101  # the benchmark's seeds start here: the configs were tuned on seeds 1-16, never on these
RETURN = "env_runners/episode_return_mean"
LINEAR = "linear"  # an SB3 argument given as (LINEAR, start): a schedule falling linearly to 0, as RL Zoo's


@dataclass(frozen=True)
class Task:
    env: str
    target: float
    config: str  # ours
    seeds: int  # how many seeds by default
    cap: float  # seconds per run
    algo: str  # SB3 class, and the algorithm of our config
    n_envs: int = 1
    normalize: bool = False  # RL Zoo's VecNormalize (observations and rewards)
    # SB3's SubprocVecEnv (an env per process) in place of DummyVecEnv; forked, which starts in
    # about a second where its default (forkserver) imports SB3 again in each process
    subprocesses: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)  # RL Zoo's hyperparameters for this env


# RL Zoo's hyperparameters (rl-baselines3-zoo, hyperparams/<algo>.yml) for each env.
TASKS = {
    t.env: t
    for t in (
        Task("CartPole-v1", 475.0, "configs/cartpole-ppo.yaml", 5, 300, "PPO", n_envs=8, kwargs={
            "n_steps": 32, "batch_size": 256, "gae_lambda": 0.8, "gamma": 0.98, "n_epochs": 20,
            "ent_coef": 0.0, "learning_rate": (LINEAR, 1e-3), "clip_range": (LINEAR, 0.2)}),
        Task("Acrobot-v1", -100.0, "configs/acrobot-ppo.yaml", 3, 600, "PPO", n_envs=16, normalize=True,
             kwargs={"n_steps": 256, "gae_lambda": 0.94, "gamma": 0.99, "n_epochs": 4, "ent_coef": 0.0}),
        Task("Pendulum-v1", -200.0, "configs/pendulum-sac.yaml", 3, 600, "SAC",
             kwargs={"learning_rate": 1e-3}),
        Task("LunarLander-v3", 200.0, "configs/lunarlander-ppo.yaml", 3, 1800, "PPO", n_envs=16, kwargs={
            "n_steps": 1024, "batch_size": 64, "gae_lambda": 0.98, "gamma": 0.999, "n_epochs": 4,
            "ent_coef": 0.01}),
    )
}  # fmt: skip


def _check_window(task: Task) -> None:
    """The config is run as users run it: its own stop must use SB3's window of WINDOW episodes."""
    (spec,) = yaml.safe_load((ROOT / task.config).read_text()).values()
    window = spec.get("config", {}).get("metrics_num_episodes_for_smoothing")
    if window != WINDOW:
        raise SystemExit(
            f"{task.config}: its stop averages {window or 'RLlib default 100'} episodes, SB3 {WINDOW}:"
            f" set metrics_num_episodes_for_smoothing: {WINDOW} in the file (the benchmark runs it unchanged)"
        )


def run_ours(task: Task, seed: int, cap: float, flags: Sequence[str] = ()) -> dict:
    """One whole ``train.py`` process; ``flags``: more of its flags (``--config.lr=0.001``)."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable, str(ROOT / "train.py"), "-f", task.config, "--seed", str(seed),
                "--local-dir", tmp,
                "--stop-time", str(cap), *flags,
            ],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        wall = time.perf_counter() - start
        progress = next(Path(tmp).glob("*/*/progress.csv"), None)
        rows = list(csv.DictReader(progress.open())) if progress else []
    if proc.returncode != 0:
        print(proc.stderr[-2000:], file=sys.stderr)
    curve = [(float(r["time_total_s"]), float(r[RETURN] or "nan")) for r in rows]
    solved = [r for r in rows if float(r[RETURN] or "-inf") >= task.target]
    offset = wall - (
        curve[-1][0] if curve else 0
    )  # start-up and shut-down put the curve on the process clock
    return {
        "tool": "ours", "seed": seed, "wall": wall, "solved": bool(solved), "rc": proc.returncode,
        "steps": int(float((solved or rows)[0 if solved else -1]["num_env_steps_sampled_lifetime"]))
        if rows
        else None,  # when not solved: the steps it ran
        "curve": [(t + offset, r) for t, r in curve],
        "notices": [line for line in proc.stderr.splitlines() if line.startswith("notice:")],
    }  # fmt: skip


def run_sb3(task: Task, seed: int, cap: float) -> dict:
    report, wall = run_sb3_worker(__file__, [task.env, str(seed), "--cap", str(cap)])
    return {
        "tool": "sb3", "seed": seed, "wall": wall, "solved": report["solved"], "rc": 0,
        "steps": report["steps"],  # when not solved: the steps it ran
        "curve": report["curve"],
    }  # fmt: skip


def sb3_worker(task: Task, seed: int, cap: float) -> None:
    """Runs inside the SB3 subprocess: train until solved or the cap, print one JSON line."""
    t0 = time.perf_counter()
    import stable_baselines3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecNormalize

    class Stop(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[float, float]] = []
            self.solved = False
            self.episodes = 0  # ended so far (ep_info_buffer keeps only the last 100)
            self.seen = 0

        def _mean(self) -> float | None:
            returns = [ep["r"] for ep in list(self.model.ep_info_buffer)[-WINDOW:]]
            return sum(returns) / WINDOW if len(returns) == WINDOW else None

        def _on_step(self) -> bool:
            self.episodes += sum(bool(done) for done in self.locals["dones"])
            mean = self._mean()
            if mean is not None and self.episodes != self.seen:
                self.seen = self.episodes
                if not self.curve or time.perf_counter() - t0 - self.curve[-1][0] > 0.5:
                    self.curve.append((time.perf_counter() - t0, mean))
            self.solved = mean is not None and mean >= task.target
            return not self.solved and time.perf_counter() - t0 < cap

    def value(v: Any) -> Any:
        if isinstance(v, tuple) and v[0] == LINEAR:
            return lambda left, start=v[1]: left * start
        return v

    subprocesses = {"vec_env_cls": SubprocVecEnv, "vec_env_kwargs": {"start_method": "fork"}}
    env = make_vec_env(task.env, n_envs=task.n_envs, seed=seed, **(subprocesses if task.subprocesses else {}))
    if task.normalize:
        env = VecNormalize(env)
    algo = getattr(stable_baselines3, task.algo)
    kwargs = {k: value(v) for k, v in task.kwargs.items()}
    model = algo("MlpPolicy", env, seed=seed, device="cpu", **kwargs)
    stop = Stop()
    model.learn(total_timesteps=10_000_000, callback=stop)
    last = stop._mean()
    curve = [*stop.curve, (time.perf_counter() - t0, last if last is not None else float("nan"))]
    print(json.dumps({"solved": stop.solved, "steps": model.num_timesteps, "curve": curve,
                      "exit_at": time.perf_counter() - t0}))  # fmt: skip


def plot(task: Task, runs: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    colors = {"ours": "tab:blue", "sb3": "tab:orange"}
    for run in runs:
        label = f"{'train.py' if run['tool'] == 'ours' else 'SB3 ' + task.algo} seed {run['seed']}"
        ax.plot([t for t, _ in run["curve"]], [r for _, r in run["curve"]], color=colors[run["tool"]],
                alpha=0.8, label=label)  # fmt: skip
    ax.axhline(task.target, color="grey", ls="--", lw=1)
    ax.set_xlabel("wall time since the process started (s)")
    ax.set_ylabel(f"mean return, last {WINDOW} episodes")
    ax.set_title(f"{task.env}: {task.config} vs SB3 {task.algo} (RL Zoo settings)", fontsize=9)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _median(runs: list[dict]) -> tuple[float | None, bool]:
    """Median wall time, and whether it is only a lower bound.

    A run that did not solve counts with the time it ran (its true time to solve is longer), so a
    task where some seeds fail does not get a median from the lucky ones alone.
    """
    if not runs:
        return None, False
    median = statistics.median(r["wall"] for r in runs)
    # A lower bound when the unsolved runs' longer true times would move it.
    later = statistics.median(r["wall"] + (0.0 if r["solved"] else 1e9) for r in runs)
    return median, later != median


def table(task: Task, seeds: list[int], runs: list[dict]) -> tuple[list[str], tuple[float | None, bool]]:
    """Rows for one task, and its ratio of median wall times with whether that is a lower bound."""
    lines = [
        f"**{task.env}** (target {task.target:g}; ours: `{task.config}`; "
        f"SB3 {task.algo} with RL Zoo's settings)",
        "",
        "| seed | ours: wall (s) | ours: env steps | SB3: wall (s) | SB3: env steps | wall ratio ours/SB3 |",
        "|---|---|---|---|---|---|",
    ]

    def cell(r: dict | None, key: str) -> str:
        if r is None:
            return "-"
        if not r["solved"]:
            if key == "wall":
                return f"not solved (stopped at {r['wall']:.0f} s)"
            return f"{r['steps']} (not solved)" if r["steps"] else "-"
        return f"{r[key]:.1f}" if key == "wall" else f"{r[key]}"

    for seed in seeds:
        ours = next(r for r in runs if r["seed"] == seed and r["tool"] == "ours")
        sb3 = next((r for r in runs if r["seed"] == seed and r["tool"] == "sb3"), None)
        ratio = f"{ours['wall'] / sb3['wall']:.2f}" if sb3 and ours["solved"] and sb3["solved"] else "-"
        lines.append(
            f"| {seed} | {cell(ours, 'wall')} | {cell(ours, 'steps')} | {cell(sb3, 'wall')} | "
            f"{cell(sb3, 'steps')} | {ratio} |"
        )
    m_ours, ours_bound = _median([r for r in runs if r["tool"] == "ours"])
    m_sb3, sb3_bound = _median([r for r in runs if r["tool"] == "sb3"])
    ratio = m_ours / m_sb3 if m_ours and m_sb3 and not sb3_bound else None

    def median_text(value: float | None, bound: bool) -> str:
        return "-" if value is None else f"{'>= ' if bound else ''}{value:.1f} s"

    lines += [
        "",
        f"Median wall time (a run that did not solve counts with the time it ran): ours "
        f"{median_text(m_ours, ours_bound)}, SB3 {median_text(m_sb3, sb3_bound)}"
        + (f"; ratio ours/SB3 = {'>= ' if ours_bound else ''}{ratio:.2f}" if ratio else "")
        + f". Plot: benchmarks/solve_{task.env}.png",
        "",
    ]
    return lines, (ratio, ours_bound)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        help="seeds for every task (default: 5 for CartPole, 3 others, from 101: none a config was tuned on)",
    )
    p.add_argument("--cap", type=float, help="time cap per run in seconds (default: the task's)")
    p.add_argument("--skip-sb3", action="store_true")
    p.add_argument("--sb3-worker", nargs=2, metavar=("ENV", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sb3_worker is not None:
        env, seed = args.sb3_worker
        sb3_worker(TASKS[env], int(seed), args.cap or TASKS[env].cap)
        return
    command = "python benchmarks/solve_suite.py " + " ".join(sys.argv[1:])
    lines = [
        f"### solve_suite: time to solve, train.py vs Stable-Baselines3, {datetime.date.today()}",
        f"Machine: {machine()}. `{command.strip()}`. Criterion for both: mean return over the last "
        f"{WINDOW} episodes >= the target; wall time is the whole process from launch to exit (ours: "
        "Python and imports; no Ray is started for these in-process configs; SB3: Python and imports).",
        "",
    ]
    ratios = {}
    for name in args.tasks:
        task = TASKS[name]
        _check_window(task)
        seeds = args.seeds or [HELD_OUT + i for i in range(task.seeds)]
        cap = args.cap or task.cap
        runs = []
        for i, seed in enumerate(seeds):
            tools = (("ours", run_ours), ("sb3", run_sb3))
            for tool, run_fn in tools if i % 2 == 0 else tools[::-1]:  # who runs first alternates
                if tool == "sb3" and args.skip_sb3:
                    continue
                print(f"{name} {tool} seed {seed} ...", end=" ", flush=True)
                run = run_fn(task, seed, cap)
                runs.append(run)
                state = "solved" if run["solved"] else "NOT solved"
                print(f"{state} in {run['wall']:.1f} s, {run['steps'] or '-'} steps")
        rows, ratios[name] = table(task, seeds, runs)
        lines += rows
        plot(task, runs, ROOT / "benchmarks" / f"solve_{name}.png")
    summary = ", ".join(
        f"{n} {'>= ' if bound else ''}{r:.2f}" if r else f"{n} -" for n, (r, bound) in ratios.items()
    )
    lines.append(
        f"Ratios of median wall times, ours/SB3 (targets: <= 1.0 each, <= 0.8 on CartPole-v1): {summary}."
    )
    append_results(lines)


if __name__ == "__main__":
    main()
