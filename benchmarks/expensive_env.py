"""Time to solve when env steps are expensive: the solve suite's tasks behind a fixed cost per step.

A game or a simulator spends milliseconds on a step where CartPole spends microseconds, so there
every env step is paid in full. Each task's env is wrapped to spend ``--ms`` per step and per
reset (``benchmarks/costly_env.py``): ``--cost busy`` spins on the CPU, so the cost competes
for the machine's cores, as a simulator's physics does; ``--cost sleep`` waits, as for a game on
cores of its own. Each tool runs as a user would first run it:

* ours: ``train.py -f`` the task's shipped config, unchanged but for the env, no key set by hand
  (``--ours-mode auto``). CartPole's config names gymnasium's own vectorized CartPole
  (``gym_env_vectorize_mode: vector_entry_point``), which the costly env has not: train.py
  refuses it, and its hint says to drop the key, so the run's copy of the config leaves it out.
  The start-up check then times the env's step and decides how its envs step
  (``envsdk/training/substitutes/sampling/parallel_envs.py``); each run's line says whether it chose processes
  (``async``). ``--ours-mode async`` or ``sync`` sets the key by hand instead;
* SB3: RL Zoo's settings for the task, its envs stepped one after another (``--sb3-vec dummy``,
  RL Zoo's default vectorisation, which issue 62's target is against); ``--sb3-vec subproc``:
  SubprocVecEnv processes.

Both stop once the mean return of the last 20 episodes reaches the task's target, or at the
cap. Whole processes are timed, and which tool runs first alternates from seed to seed.

    python benchmarks/expensive_env.py [--tasks CartPole-v1 Acrobot-v1] [--seeds 101 102] [--ms 1]

``--overhead N [N ...]`` measures instead what the parallel-envs choice's threshold rests on:
the median time of one step of N CartPoles whose steps spin for each of a few CPU costs, in
gymnasium's sync vector env and in its async one (a process per env), printed and not recorded.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import yaml

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


def users_config(name: str, folder: Path) -> str:
    """The task's shipped config as a user's first try on the costly env would read: without a
    ``gym_env_vectorize_mode: vector_entry_point`` (gymnasium's vector version of the base env,
    which the costly env has not; train.py refuses it, with the hint to drop the key)."""
    shipped = solve_suite.ROOT / solve_suite.TASKS[name].config
    experiments = yaml.safe_load(shipped.read_text())
    for spec in experiments.values():
        config = spec.get("config", {})
        if config.get("gym_env_vectorize_mode") == "vector_entry_point":
            del config["gym_env_vectorize_mode"]
    path = folder / shipped.name
    path.write_text(yaml.safe_dump(experiments, sort_keys=False))
    return str(path)


def run_ours(name: str, seed: int, args: argparse.Namespace, config: str) -> dict:
    task = dataclasses.replace(costly_task(name, args.ms, args.cost, args.sb3_vec), config=config)
    flags = ["--env", task.env]
    if args.ours_mode != "auto":
        flags.append(f"--config.gym_env_vectorize_mode={args.ours_mode}")
    run = solve_suite.run_ours(task, seed, args.cap, flags)
    run["async"] = any("(gym_env_vectorize_mode: async)" in line for line in run["notices"])
    return run


class CpuCost(gym.Wrapper):
    """``step`` spins until it has spent ``ms`` of this process's CPU time: a simulator's physics,
    whose cost does not shrink when the process waits for a core (``costly_env``'s ``busy`` spins
    for wall time)."""

    def __init__(self, env: gym.Env, ms: float) -> None:
        super().__init__(env)
        self.seconds = ms / 1000.0

    def step(self, action: object) -> tuple:
        start = time.process_time()
        out = self.env.step(action)
        while time.process_time() - start < self.seconds:
            pass
        return out


def vector_step_ms(mode: str, envs: int, ms: float, steps: int) -> float:
    """The median time of one step of ``envs`` CartPoles whose step costs ``ms`` of CPU each, in
    gymnasium's ``sync`` or ``async`` vector env."""
    fns = [lambda: CpuCost(gym.make("CartPole-v1"), ms) for _ in range(envs)]
    vector = gym.vector.SyncVectorEnv(fns) if mode == "sync" else gym.vector.AsyncVectorEnv(fns)
    vector.reset(seed=0)
    actions = np.zeros(envs, dtype=np.int64)
    times = []
    for i in range(steps + 5):  # the first 5 warm up
        began = time.perf_counter()
        vector.step(actions)
        if i >= 5:
            times.append(time.perf_counter() - began)
    vector.close()
    return statistics.median(times) * 1000


def overhead(counts: list[int]) -> None:
    """``--overhead``: sync against async vector steps over step costs, printed."""
    print(f"Machine: {machine()}; {os.cpu_count()} CPUs. One vector step of N CartPoles, median (ms):")
    for envs in counts:
        for ms in (0.0, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0):
            steps = 300 if ms <= 0.2 else 100
            sync, parallel = (vector_step_ms(mode, envs, ms, steps) for mode in ("sync", "async"))
            each = f"; async's own cost per env: {(parallel - sync) / envs * 1000:.0f} us" if ms == 0 else ""
            print(
                f"N={envs:3d} step {ms:4.2f} ms: sync {sync:7.2f}  async {parallel:7.2f}"
                f"  async/sync {parallel / sync:5.2f}{each}",
                flush=True,
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(solve_suite.TASKS))
    p.add_argument("--seeds", type=int, nargs="+", default=[solve_suite.HELD_OUT, solve_suite.HELD_OUT + 1])
    p.add_argument("--ms", type=int, default=1, choices=costly_env.MILLISECONDS)
    p.add_argument("--cost", default="busy", choices=costly_env.COSTS)
    p.add_argument("--ours-mode", default="auto", choices=("auto", "async", "sync"))
    p.add_argument("--sb3-vec", default="dummy", choices=("dummy", "subproc"))
    p.add_argument("--cap", type=float, default=900.0, help="seconds per run")
    p.add_argument(
        "--overhead", type=int, nargs="+", metavar="N", help="vector steps of N envs, sync vs async"
    )
    p.add_argument("--sb3-worker", nargs=2, metavar=("ENV", "SEED"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.overhead:
        overhead(args.overhead)
        return
    # Both tools' processes (and their env processes) import costly_env by gymnasium's module:id.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    if args.sb3_worker is not None:
        name, seed = args.sb3_worker
        solve_suite.sb3_worker(costly_task(name, args.ms, args.cost, args.sb3_vec), int(seed), args.cap)
        return
    command = "python benchmarks/expensive_env.py " + " ".join(sys.argv[1:])
    ours = (
        "the shipped config unchanged but for the env (gymnasium's vector_entry_point left out), the"
        " vectorize mode the start-up check chose"
        if args.ours_mode == "auto"
        else f"the shipped config with gym_env_vectorize_mode: {args.ours_mode}"
    )
    lines = [
        f"### expensive_env: time to solve at {args.ms:g} ms a step ({args.cost}), train.py vs"
        f" Stable-Baselines3, {datetime.date.today()}",
        f"Machine: {machine()}. `{command.strip()}`. Each env step and reset costs {args.ms:g} ms"
        f" ({'spinning on the CPU' if args.cost == 'busy' else 'waiting'}). Ours: {ours}; SB3: RL Zoo's"
        f" settings, {'SubprocVecEnv' if args.sb3_vec == 'subproc' else 'DummyVecEnv'}. Criterion for"
        f" both: mean return over the last {solve_suite.WINDOW} episodes >= the target; whole processes"
        " timed.",
        "",
    ]
    ratios = {}
    chosen = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.tasks:
            task = costly_task(name, args.ms, args.cost, args.sb3_vec)
            config = users_config(name, Path(folder))
            runs = []
            for i, seed in enumerate(args.seeds):
                tools = (("ours", functools.partial(run_ours, config=config)), ("sb3", run_sb3))
                for tool, run_fn in tools if i % 2 == 0 else tools[::-1]:
                    print(f"{task.env} {tool} seed {seed} ...", end=" ", flush=True)
                    run = run_fn(name, seed, args)
                    runs.append(run)
                    state = "solved" if run["solved"] else "NOT solved"
                    mode = f", {'async' if run['async'] else 'sync'} envs" if tool == "ours" else ""
                    print(f"{state} in {run['wall']:.1f} s, {run['steps']} steps{mode}")
            chosen.append(f"{name} {sum(r['async'] for r in runs if r['tool'] == 'ours')}/{len(args.seeds)}")
            rows, ratios[name] = solve_suite.table(task, args.seeds, runs)
            lines += [row.split(" Plot:")[0] for row in rows]  # no plot: the curves are the solve suite's
    summary = ", ".join(
        f"{n} {'>= ' if bound else ''}{r:.2f}" if r else f"{n} -" for n, (r, bound) in ratios.items()
    )
    lines.append(f"Ratios of median wall times, ours/SB3 (target: <= 0.8 each): {summary}.")
    if args.ours_mode == "auto":
        lines.append(f"Runs of ours whose start-up check chose processes (async): {', '.join(chosen)}.")
    append_results(lines)


if __name__ == "__main__":
    main()
