"""A fixed env-step budget on the heavy families: our train.py against Stable-Baselines3, in one run.

For each task and seed, two whole processes are timed from launch to exit, one after the other
(which runs first alternates from seed to seed):

* ours: ``python train.py -f <the shipped config> --seed S --stop-timesteps <budget>``, with
  ``--config`` flags that set RL Zoo's hyperparameters where the shipped config differs;
* SB3: the same algorithm with RL Zoo's published hyperparameters, in a subprocess of this script.

Tasks (RL Zoo, ``hyperparams/ppo.yml`` ``atari`` and ``hyperparams/sac.yml`` ``HalfCheetah``):

* Atari Pong, PPO, 200k env steps: 8 envs x 128 steps, minibatches of 256, 4 epochs, lr 2.5e-4,
  clip 0.1, value coefficient 0.5, entropy 0.01, gradient norm 0.5, Nature CNN (512 units, shared
  by the policy and value heads), the standard preprocessing (84x84 grayscale, 4 frames skipped
  and stacked, up to 30 no-ops).  RL Zoo decays lr and clip linearly over 10M steps: within 200k
  they move by 2%, so both tools run them constant.
* HalfCheetah-v5, SAC, 50k env steps: 256x256 networks, lr 3e-4, batches of 256, one update per
  env step after 10,000 random steps (``configs/halfcheetah-sac.yaml`` as shipped).

Both tools report the mean return of the last ``WINDOW`` episodes.  The script prints a table
per task (wall time, return at the budget, ratios), appends it to benchmarks/RESULTS.md and
writes benchmarks/budget_<task>.png (return against env steps and against wall time, both tools).
SB3 is a benchmark-only dependency (``pip install -e '.[bench]'``; ``make bench`` does it).

    python benchmarks/fixed_budget.py [--tasks pong halfcheetah] [--seeds 101 102] [--budget 20000]
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine, run_sb3_worker

WINDOW = 10  # episodes in the mean return, for both tools (HalfCheetah has 50 in its budget)
SEEDS = [101, 102]  # as the solve suite's held-out seeds; two, so that each tool runs first once
STEPS = "num_env_steps_sampled_lifetime"
RETURN = "env_runners/episode_return_mean"


@dataclass(frozen=True)
class Task:
    name: str
    budget: int  # env steps
    config: str  # ours, as shipped
    flags: list[str]  # ours: the --config flags that make its settings RL Zoo's
    env: str  # SB3's env id
    algo: str
    policy: str
    n_envs: int = 1
    atari: bool = False  # SB3's make_atari_env (AtariWrapper) and 4 stacked frames
    kwargs: dict[str, Any] = field(default_factory=dict)  # RL Zoo's hyperparameters


# Both tools compute on the machine's cores: SB3's torch takes them all; an in-process trial of
# ours takes num_cpus_for_main_process threads (1 by default, as a Tune trial of 1 CPU).
CORES = ["--config.num_cpus_for_main_process=2"]
TASKS = {
    t.name: t
    for t in (
        Task("pong", 200_000, "configs/atari-pong-ppo.yaml", [
            "--config.num_env_runners=0", "--config.num_envs_per_env_runner=8",
            "--config.train_batch_size=1024", "--config.minibatch_size=256", "--config.num_epochs=4",
            "--config.lr=0.00025", "--config.clip_param=0.1", "--config.vf_loss_coeff=0.5",
            "--config.entropy_coeff=0.01", "--config.grad_clip=0.5", "--config.lambda_=0.95",
            "--config.gamma=0.99", "--config.use_kl_loss=false", "--config.kl_coeff=0.0",
            "--config.vf_clip_param=.inf",  # SB3 leaves the value loss unclipped
        ], "PongNoFrameskip-v4", "PPO", "CnnPolicy", n_envs=8, atari=True, kwargs={
            "n_steps": 128, "n_epochs": 4, "batch_size": 256, "learning_rate": 2.5e-4,
            "clip_range": 0.1, "vf_coef": 0.5, "ent_coef": 0.01}),
        Task("halfcheetah", 50_000, "configs/halfcheetah-sac.yaml", [], "HalfCheetah-v5", "SAC",
             "MlpPolicy", kwargs={"learning_starts": 10_000}),
    )
}  # fmt: skip


def run_ours(task: Task, seed: int, budget: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable, str(ROOT / "train.py"), "-f", task.config, "--seed", str(seed),
                "--stop-timesteps", str(budget), "--local-dir", tmp, *task.flags, *CORES,
                f"--config.metrics_num_episodes_for_smoothing={WINDOW}",
            ],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        wall = time.perf_counter() - start
        progress = next(Path(tmp).glob("*/*/progress.csv"), None)
        rows = list(csv.DictReader(progress.open())) if progress else []
    if proc.returncode != 0 or not rows:
        raise SystemExit(f"our run failed:\n{proc.stdout[-1500:]}\n{proc.stderr[-2500:]}")
    offset = wall - float(rows[-1]["time_total_s"])  # start-up (and shut-down) on the process clock
    curve = [
        (int(float(r[STEPS])), float(r["time_total_s"]) + offset, float(r[RETURN]))
        for r in rows
        if r.get(RETURN)
    ]
    return {"tool": "ours", "seed": seed, "wall": wall, "steps": int(float(rows[-1][STEPS])), "curve": curve}


def run_sb3(task: Task, seed: int, budget: int) -> dict:
    report, wall = run_sb3_worker(__file__, [task.name, str(seed), "--budget", str(budget)])
    return {"tool": "sb3", "seed": seed, "wall": wall, "steps": report["steps"], "curve": report["curve"]}


def sb3_model(task: Task, seed: int, **changes: Any) -> Any:
    """SB3's model for the task, with RL Zoo's settings (``changes`` replace some), on its vec env."""
    import stable_baselines3
    from stable_baselines3.common.env_util import make_atari_env, make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack

    if task.atari:
        import ale_py
        import gymnasium

        gymnasium.register_envs(ale_py)
        env = VecFrameStack(make_atari_env(task.env, n_envs=task.n_envs, seed=seed), n_stack=4)
    else:
        env = make_vec_env(task.env, n_envs=task.n_envs, seed=seed)
    algo = getattr(stable_baselines3, task.algo)
    return algo(task.policy, env, seed=seed, device="cpu", **{**task.kwargs, **changes})


def sb3_worker(task: Task, seed: int, budget: int) -> None:
    """Runs inside the SB3 subprocess: train for the budget, print one JSON line."""
    t0 = time.perf_counter()
    from stable_baselines3.common.callbacks import BaseCallback

    class Curve(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.curve: list[tuple[int, float, float]] = []

        def _on_step(self) -> bool:
            if any(self.locals["dones"]):
                returns = [ep["r"] for ep in list(self.model.ep_info_buffer)[-WINDOW:]]
                if returns:
                    mean = sum(returns) / len(returns)
                    self.curve.append((self.model.num_timesteps, time.perf_counter() - t0, mean))
            return True

    model = sb3_model(task, seed)
    curve = Curve()
    model.learn(total_timesteps=budget, callback=curve)
    print(
        json.dumps({"steps": model.num_timesteps, "curve": curve.curve, "exit_at": time.perf_counter() - t0})
    )


def at_budget(run: dict) -> float:
    """The mean return of the last WINDOW episodes when the budget was spent."""
    return run["curve"][-1][2] if run["curve"] else float("nan")


def plot(task: Task, runs: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (by_steps, by_time) = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    colors = {"ours": "tab:blue", "sb3": "tab:orange"}
    for run in runs:
        label = f"{'train.py' if run['tool'] == 'ours' else 'SB3'} seed {run['seed']}"
        steps, times, returns = zip(*run["curve"], strict=True) if run["curve"] else ((), (), ())
        by_steps.plot(steps, returns, color=colors[run["tool"]], alpha=0.8, label=label)
        by_time.plot(times, returns, color=colors[run["tool"]], alpha=0.8, label=label)
    by_steps.set_xlabel("env steps")
    by_steps.set_ylabel(f"mean return, last {WINDOW} episodes")
    by_time.set_xlabel("wall time since the process started (s)")
    for ax in (by_steps, by_time):
        ax.grid(alpha=0.3)
    by_time.legend(fontsize=7)
    fig.suptitle(f"{task.env}: {task.algo}, {task.budget:,} env steps, RL Zoo settings", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def table(task: Task, budget: int, seeds: list[int], runs: list[dict]) -> list[str]:
    lines = [
        f"**{task.name}: {task.env} {task.algo}, {budget:,} env steps** "
        f"(ours: `{task.config}` with RL Zoo's settings; SB3 {task.algo} with RL Zoo's)",
        "",
        "| seed | ours: wall (s) | ours: return | SB3: wall (s) | SB3: return | wall ratio ours/SB3 |",
        "|---|---|---|---|---|---|",
    ]
    for seed in seeds:
        ours = next(r for r in runs if r["seed"] == seed and r["tool"] == "ours")
        sb3 = next(r for r in runs if r["seed"] == seed and r["tool"] == "sb3")
        lines.append(
            f"| {seed} | {ours['wall']:.1f} | {at_budget(ours):.1f} | {sb3['wall']:.1f} | "
            f"{at_budget(sb3):.1f} | {ours['wall'] / sb3['wall']:.2f} |"
        )
    tools = ("ours", "sb3")
    walls = {tool: statistics.median(r["wall"] for r in runs if r["tool"] == tool) for tool in tools}
    returns = {tool: [at_budget(r) for r in runs if r["tool"] == tool] for tool in tools}

    def spread(values: list[float]) -> str:
        mean = statistics.mean(values)
        return f"{mean:.1f}" + (f" ± {statistics.stdev(values):.1f}" if len(values) > 1 else "")

    lines += [
        "",
        f"Median wall time: ours {walls['ours']:.1f} s, SB3 {walls['sb3']:.1f} s; "
        f"ratio ours/SB3 = {walls['ours'] / walls['sb3']:.2f} (target <= 0.7). Return at the budget "
        f"(mean over seeds, ± their standard deviation): ours {spread(returns['ours'])}, "
        f"SB3 {spread(returns['sb3'])}. Plot: benchmarks/budget_{task.name}.png",
        "",
    ]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=SEEDS)
    p.add_argument("--budget", type=int, help="env steps per run (default: the task's)")
    p.add_argument("--sb3-worker", nargs=2, metavar=("TASK", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sb3_worker is not None:
        name, seed = args.sb3_worker
        sb3_worker(TASKS[name], int(seed), args.budget or TASKS[name].budget)
        return
    command = "python benchmarks/fixed_budget.py " + " ".join(sys.argv[1:])
    lines = [
        f"### fixed_budget: a fixed env-step budget, train.py vs Stable-Baselines3, {datetime.date.today()}",
        f"Machine: {machine()}. `{command.strip()}`. Wall time is the whole process from launch to exit; "
        f"the return is the mean of the last {WINDOW} episodes at the budget; the tools alternate.",
        "",
    ]
    for name in args.tasks:
        task = TASKS[name]
        budget = args.budget or task.budget
        runs = []
        for i, seed in enumerate(args.seeds):
            tools = (("ours", run_ours), ("sb3", run_sb3))
            for tool, run_fn in tools if i % 2 == 0 else tools[::-1]:  # who runs first alternates
                print(f"{name} {tool} seed {seed} ...", end=" ", flush=True)
                run = run_fn(task, seed, budget)
                runs.append(run)
                print(f"{run['wall']:.1f} s, {run['steps']} steps, return {at_budget(run):.1f}", flush=True)
        lines += table(task, budget, args.seeds, runs)
        plot(task, runs, ROOT / "benchmarks" / f"budget_{name}.png")
    append_results(lines)


if __name__ == "__main__":
    main()
