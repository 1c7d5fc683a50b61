"""Sparse rewards: PPO with curiosity, with RND and with the env's reward alone on the switch corridor.

The task (``benchmarks/sparse_corridor.py``): a switch at the far end of a corridor of 8 cells, the
one reward back at the start once it is on; random play finds it in about 2 episodes of 100,000.
Each variant is ``train.py`` on the same PPO settings, ``reward_signals`` the only difference, for
``--budget`` env steps, on each seed; a run counts as solved at its first iteration whose mean
return (RLlib's window of episodes) reaches ``--target`` (0.8 of the maximum, 1.0).  Each run's
intrinsic reward and model losses are progress.csv columns; their last values are reported.

    python benchmarks/reward_signals.py [--seeds 1 2 3] [--budget 150000] [--length 8]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import append_results, machine

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXTRINSIC = {"extrinsic": {"strength": 1.0}}
MODEL = {"learning_rate": 1e-3, "encoding_size": 64}
# RND's squared distance is smaller than curiosity's forward error on this task (progress.csv's
# reward_mean columns): its strength is larger, as a user sets each signal's to its scale.
VARIANTS = {
    "extrinsic": EXTRINSIC,
    "curiosity": {**EXTRINSIC, "curiosity": {"strength": 0.1, **MODEL}},
    "rnd": {**EXTRINSIC, "rnd": {"strength": 1.0, **MODEL}},
}
PPO = {
    "num_env_runners": 0,
    "num_envs_per_env_runner": 8,
    "train_batch_size": 2048,
    "minibatch_size": 256,
    "num_epochs": 4,
    "lr": 3e-4,
    "gamma": 0.99,
    "entropy_coeff": 0.01,
    "model_config": {"fcnet_hiddens": [64, 64]},
}
ENV = "sparse_corridor:SwitchCorridor-v0"
RETURN = "env_runners/episode_return_mean"
STEPS = "num_env_steps_sampled_lifetime"


def _command(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python train.py|rollout.py ARGS`` in the repository, the corridor importable."""
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(HERE)}, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{script} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def train(name: str, run: str, config: dict, stop: dict, seed: int, out: Path) -> list[dict[str, str]]:
    """One ``train.py`` run on the corridor; its progress.csv rows."""
    experiment = {name: {"run": run, "env": ENV, "stop": stop, "config": config}}
    path = out / f"{name}-{seed}.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    results = out / f"{name}-{seed}"
    _command("train.py", "-f", str(path), "--seed", str(seed), "--local-dir", str(results))
    (progress,) = results.glob("*/*/progress.csv")
    return list(csv.DictReader(progress.open()))


def run(variant: str, seed: int, args: argparse.Namespace, out: Path, keys: dict | None = None) -> dict:
    """One PPO run (``keys``: its reward_signals and cloning, else VARIANTS's); its curve, first step
    at the target, and last signal columns."""
    own = keys or {"reward_signals": VARIANTS[variant]}
    config = {**PPO, "env_config": {"length": args.length}, **own}
    started = time.perf_counter()
    rows = train(variant, "PPO", config, {STEPS: args.budget}, seed, out)
    wall = time.perf_counter() - started
    curve = [(int(float(r[STEPS])), float(r[RETURN] or 0.0)) for r in rows]
    solved = next((steps for steps, ret in curve if ret >= args.target), None)
    mine = "learners/default_policy/reward_signals/"  # each signal's reward and losses (not RLlib's own)
    found = {k[len(mine) :]: float(v) for k, v in rows[-1].items() if k.startswith(mine) and v}
    return {
        "variant": variant,
        "seed": seed,
        "wall": wall,
        "solved": solved,
        "final": curve[-1][1],
        "curve": curve,
        "signals": found,
    }


def imitation(args: argparse.Namespace, out: Path) -> list[str]:
    """GAIL + behavioral cloning from a recorded expert against PPO alone, and offline BC from the
    same file: the report's lines."""
    from unity_bridge.demo_files import read_demo

    demo = out / "expert.demo"
    expert = f"{HERE / 'sparse_corridor.py'}:expert"
    setting = json.dumps({"length": args.length})
    _command(
        "rollout.py",
        "--env",
        ENV,
        "--env-config",
        setting,
        "--policy",
        expert,
        "--episodes",
        "10",
        "--out",
        str(demo),
    )
    best = statistics.mean(read_demo(demo).episode_returns())
    goal = 0.9 * best
    # GAIL at ML-Agents' Pyramids strength (0.01): its reward is positive every step, and at 0.1 it
    # outweighed the one reward that ends the episode (no seed solved). The demonstration is 150
    # steps, one minibatch: cloning takes 16 passes over it an update.
    gail = {"strength": 0.01, "demo_path": str(demo), "use_actions": True}
    with_demo = {
        "reward_signals": {**EXTRINSIC, "gail": gail},
        "behavioral_cloning": {
            "demo_path": str(demo),
            "strength": 1.0,
            "num_epoch": 16,
            "steps": args.budget // 2,
        },
    }
    runs, offline = [], []
    for seed in args.seeds:
        for name, keys in (("PPO alone", {"reward_signals": EXTRINSIC}), ("PPO + GAIL + BC", with_demo)):
            tag = "imitation" if "GAIL" in name else "alone"
            runs.append({**run(tag, seed, args, out, keys), "variant": name})
            print(f"{name} seed {seed}: final return {runs[-1]['final']:.2f}")
        bc = {"input": str(demo), "env_config": {"length": args.length}, "lr": 1e-3, "evaluation_interval": 1,
              "evaluation_duration": 20, "evaluation_duration_unit": "episodes",
              "train_batch_size_per_learner": 256, "dataset_num_iters_per_learner": 40}  # fmt: skip
        rows = train("bc", "BC", bc, {"training_iteration": 5}, seed, out)
        offline.append(float(rows[-1]["evaluation/env_runners/episode_return_mean"]))
        print(f"offline BC seed {seed}: return {offline[-1]:.2f}")
    lines = [
        f"### reward_signals: imitation on the switch corridor ({args.length} cells),"
        f" {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/reward_signals.py --part imitation --seeds"
        f" {' '.join(map(str, args.seeds))} --budget {args.budget} --length {args.length}`. The expert:"
        " `rollout.py --policy sparse_corridor.py:expert --episodes 10 --out expert.demo` (the shortest"
        f" way; mean return {best:.2f}). PPO alone against PPO with `gail` (strength 0.01, use_actions)"
        " and `behavioral_cloning` (strength 1.0, num_epoch 16, annealed over half the budget), the same"
        " PPO settings;"
        f" solved: the first iteration whose mean return reaches 0.9 of the expert's ({goal:.2f}). Offline:"
        " `run: BC` with `input: expert.demo`, 5 iterations, its evaluation's mean return over 20 episodes.",
        "",
        "| variant | seed | final return | env steps to solved | wall s |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        steps = next((steps for steps, ret in r["curve"] if ret >= goal), None)
        solved = steps or "not in budget"
        lines.append(f"| {r['variant']} | {r['seed']} | {r['final']:.2f} | {solved} | {r['wall']:.1f} |")
    lines += [
        "",
        f"- offline BC from the same file: returns {', '.join(f'{x:.2f}' for x in offline)} (seeds"
        f" {', '.join(map(str, args.seeds))}); {sum(x >= goal for x in offline)} of {len(offline)}"
        " reach 0.9 of the expert's.",
    ]
    return lines


def signals(args: argparse.Namespace, out: Path) -> list[str]:
    """Curiosity, RND and the env's reward alone: the report's lines."""
    import sparse_corridor

    chance = sparse_corridor.random_success(args.length, 100_000)
    runs = []
    for seed in args.seeds:
        for variant in VARIANTS:  # each seed runs every variant in turn: the machine's noise spread
            runs.append(run(variant, seed, args, out))
            r = runs[-1]
            print(f"{variant} seed {seed}: final return {r['final']:.2f}, solved at {r['solved']}")
    seeds = " ".join(map(str, args.seeds))
    lines = [
        f"### reward_signals: PPO with curiosity / RND / the env's reward alone on the switch corridor"
        f" ({args.length} cells), {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/reward_signals.py --seeds {seeds} --budget {args.budget}"
        f" --length {args.length}`. Random play finds the reward in {chance:.4%} of episodes (100,000"
        " played). The same PPO settings for every variant; `reward_signals` the only difference. Solved:"
        f" the first iteration whose mean return reaches {args.target}.",
        "",
        "| variant | seed | final return | env steps to solved | last intrinsic reward, loss | wall s |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        own = ", ".join(
            f"{k} {v:.3g}" for k, v in sorted(r["signals"].items()) if not k.startswith("extrinsic")
        )
        solved = r["solved"] or "not in budget"
        lines.append(
            f"| {r['variant']} | {r['seed']} | {r['final']:.2f} | {solved} | {own or '-'} | {r['wall']:.1f} |"
        )
    lines.append("")
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        reached = [r["solved"] for r in mine if r["solved"] is not None]
        median = statistics.median(r["final"] for r in mine)
        lines.append(
            f"- {variant}: solved on {len(reached)} of {len(mine)} seeds within {args.budget:,} env steps"
            + (f" (median {statistics.median(reached):,.0f} steps)" if reached else "")
            + f"; median final return {median:.2f}."
        )
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("signals", "imitation", "both"), default="both")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--budget", type=int, default=150_000, help="env steps per run")
    p.add_argument("--length", type=int, default=8, help="the corridor's cells")
    p.add_argument("--target", type=float, default=0.8, help="mean return that counts as solved (max 1.0)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("signals", "both"):
            append_results(signals(args, Path(tmp)))
        if args.part in ("imitation", "both"):
            append_results(imitation(args, Path(tmp)))


if __name__ == "__main__":
    main()
