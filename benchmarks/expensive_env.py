"""Time to solve when env steps are expensive: the solve suite's tasks behind a fixed cost per step.

A game or a simulator spends milliseconds on a step where CartPole spends microseconds, so there
every env step is paid in full. Each task's env is wrapped to spend ``--ms`` per step and per
reset (``benchmarks/costly_env.py``): ``--cost busy`` spins on the CPU, so the cost competes
for the machine's cores, as a simulator's physics does; ``--cost sleep`` waits, as for a game on
cores of its own. Each tool is allowed the machine's cores, its own way:

* ours: ``train.py -f`` the task's shipped config, unchanged but for the env and
  ``gym_env_vectorize_mode`` (``--ours-mode``: ``async``, each of the config's envs in a process
  of its own, is what a user with an expensive env would write; ``sync`` steps them in turn);
* SB3: RL Zoo's settings for the task, its envs in SubprocVecEnv processes (``--sb3-vec
  subproc``; ``dummy`` steps them in turn, RL Zoo's default).

Both stop once the mean return of the last 20 episodes reaches the task's target, or at the
cap. Whole processes are timed, and which tool runs first alternates from seed to seed.

    python benchmarks/expensive_env.py [--tasks CartPole-v1 Acrobot-v1] [--seeds 101 102] [--ms 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import costly_env
import solve_suite
from common import append_results, machine, run_sb3_worker

HERE = Path(__file__).resolve().parent
TASKS = ("CartPole-v1", "Acrobot-v1")  # LunarLander at 1 ms a step takes hours here (issue 49)


def costly_task(name: str, ms: float, cost: str, sb3_vec: str) -> solve_suite.Task:
    """The solve suite's task, its env behind the cost (gymnasium's ``module:id``)."""
    task = solve_suite.TASKS[name]
    return dataclasses.replace(
        task, env=f"costly_env:{costly_env.env_id(name, ms, cost)}", subprocesses=sb3_vec == "subproc"
    )


def run_sb3(name: str, seed: int, args: argparse.Namespace) -> dict:
    costs = ["--ms", f"{args.ms:g}", "--cost", args.cost, "--sb3-vec", args.sb3_vec]
    report, wall = run_sb3_worker(__file__, [name, str(seed), "--cap", str(args.cap), *costs])
    return {
        "tool": "sb3", "seed": seed, "wall": wall, "solved": report["solved"], "rc": 0,
        "steps": report["steps"], "curve": report["curve"],
    }  # fmt: skip


def run_ours(name: str, seed: int, args: argparse.Namespace) -> dict:
    task = costly_task(name, args.ms, args.cost, args.sb3_vec)
    flags = ["--env", task.env, f"--config.gym_env_vectorize_mode={args.ours_mode}"]
    return solve_suite.run_ours(task, seed, args.cap, flags)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(solve_suite.TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=[solve_suite.HELD_OUT, solve_suite.HELD_OUT + 1])
    p.add_argument("--ms", type=int, default=1, choices=costly_env.MILLISECONDS)
    p.add_argument("--cost", default="busy", choices=costly_env.COSTS)
    p.add_argument("--ours-mode", default="async", choices=("async", "sync"))
    p.add_argument("--sb3-vec", default="subproc", choices=("subproc", "dummy"))
    p.add_argument("--cap", type=float, default=900.0, help="seconds per run")
    p.add_argument("--sb3-worker", nargs=2, metavar=("ENV", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args()
    # Both tools' processes (and their env processes) import costly_env by gymnasium's module:id.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    if args.sb3_worker is not None:
        name, seed = args.sb3_worker
        solve_suite.sb3_worker(costly_task(name, args.ms, args.cost, args.sb3_vec), int(seed), args.cap)
        return
    command = "python benchmarks/expensive_env.py " + " ".join(sys.argv[1:])
    lines = [
        f"### expensive_env: time to solve at {args.ms:g} ms a step ({args.cost}), train.py vs"
        f" Stable-Baselines3, {datetime.date.today()}",
        f"Machine: {machine()}. `{command.strip()}`. Each env step and reset costs {args.ms:g} ms"
        f" ({'spinning on the CPU' if args.cost == 'busy' else 'waiting'}). Ours: the shipped config with"
        f" gym_env_vectorize_mode: {args.ours_mode}; SB3: RL Zoo's settings,"
        f" {'SubprocVecEnv' if args.sb3_vec == 'subproc' else 'DummyVecEnv'}. Criterion for both: mean"
        f" return over the last {solve_suite.WINDOW} episodes >= the target; whole processes timed.",
        "",
    ]
    ratios = {}
    for name in args.tasks:
        task = costly_task(name, args.ms, args.cost, args.sb3_vec)
        runs = []
        for i, seed in enumerate(args.seeds):
            tools = (("ours", run_ours), ("sb3", run_sb3))
            for tool, run_fn in tools if i % 2 == 0 else tools[::-1]:
                print(f"{task.env} {tool} seed {seed} ...", end=" ", flush=True)
                run = run_fn(name, seed, args)
                runs.append(run)
                state = "solved" if run["solved"] else "NOT solved"
                print(f"{state} in {run['wall']:.1f} s, {run['steps']} steps")
        rows, ratios[name] = solve_suite.table(task, args.seeds, runs)
        lines += [row.split(" Plot:")[0] for row in rows]  # no plot: the curves are the solve suite's
    summary = ", ".join(
        f"{n} {'>= ' if bound else ''}{r:.2f}" if r else f"{n} -" for n, (r, bound) in ratios.items()
    )
    lines.append(f"Ratios of median wall times, ours/SB3 (target: <= 0.8 each): {summary}.")
    append_results(lines)


if __name__ == "__main__":
    main()
