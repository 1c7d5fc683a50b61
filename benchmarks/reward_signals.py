"""Sparse rewards: PPO with curiosity, with RND and with the env's reward alone on the switch corridor.

The task (``benchmarks/sparse_corridor.py``): a switch at the far end of a corridor of 8 cells, the
one reward back at the start once it is on; random play finds it in about 2 episodes of 100,000.
Each variant is ``train.py`` on the same PPO settings, ``reward_signals`` the only difference, for
``--budget`` env steps, on each seed; a run counts as solved at its first iteration whose mean
return (RLlib's window of episodes) reaches ``--target`` (0.8 of the maximum, 1.0).  Each run's
intrinsic reward and model losses are progress.csv columns; their last values are reported.

``--part imitation`` records an expert with ``rollout.py --out expert.demo`` and runs PPO alone
against PPO with ``gail`` + ``behavioral_cloning`` from it, and offline BC from the same file, on
the corridor or (``--game pyramids``) on the Unity stand-in's Pyramids (``env: unity``; the player
is written into a temporary folder unless ``--build`` names one that exists).

    python benchmarks/reward_signals.py [--seeds 1 2 3] [--budget 150000] [--length 8]
    python benchmarks/reward_signals.py --part imitation --game pyramids [--build builds] [--budget 60000]
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
# Pyramids (unity_bridge/standin/examples.py): one agent in a room of 9 cells, 60 steps an episode;
# uniformly random play finds the brick in about a fifth of them (mean return about 0.3). One game
# stepped in train.py's own process (no Ray), as configs/unity-chase.yaml; the corridor's lr,
# epochs, entropy and network, about half its batch (one game, where the corridor steps 8).
PYRAMIDS_PPO = {
    "num_env_runners": 0,
    "train_batch_size": 1000,
    "minibatch_size": 250,
    "num_epochs": 4,
    "lr": 3e-4,
    "gamma": 0.99,
    "entropy_coeff": 0.01,
    "model_config": {"fcnet_hiddens": [64, 64]},
}
PYRAMIDS_EXPERT = ROOT / "tests" / "data" / "demos" / "pyramids_expert.py"
RETURN = "env_runners/episode_return_mean"
STEPS = "num_env_steps_sampled_lifetime"


@dataclass(frozen=True)
class Game:
    """Where a run plays: the env train.py and rollout.py get, with its settings."""

    env: str
    env_config: dict[str, Any]
    ppo: dict[str, Any]
    expert: str  # rollout.py --policy MODULE:FUNCTION
    episodes: int  # the expert's, recorded
    # offline BC's env: RLlib 2.60's offline pipeline reads no multi-agent episodes, so a one-agent
    # Unity game is read as its plain gymnasium view there (env: unity-single)
    offline_env: str


def corridor(args: argparse.Namespace) -> Game:
    """The switch corridor of ``--length`` cells."""
    expert = f"{HERE / 'sparse_corridor.py'}:expert"
    return Game(ENV, {"length": args.length}, PPO, expert, 10, ENV)


def pyramids(args: argparse.Namespace, out: Path) -> Game:
    """The stand-in's Pyramids: ``--build`` (the player, or a folder of stand-in builds), else the
    player written into ``out``."""
    from unity_bridge.standin.build import BUILDS, write_build

    if args.build is None:
        player = write_build(out / "builds", "Pyramids", BUILDS["Pyramids"])
    else:
        player = args.build / "Pyramids.x86_64" if args.build.is_dir() else args.build
        if not player.is_file():
            build = "python -m unity_bridge.standin build DIR"
            raise SystemExit(f"--build {args.build}: no Pyramids player there ({build} writes one)")
    setting = {"file_name": str(player.resolve()), "no_graphics": True}
    return Game("unity", setting, PYRAMIDS_PPO, f"{PYRAMIDS_EXPERT}:play", 50, "unity-single")


def _command(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python train.py|rollout.py ARGS`` in the repository, the corridor importable."""
    done = subprocess.run(
        [sys.executable, str(ROOT / script), *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(HERE)}, capture_output=True, text=True,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"{script} {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done


def train(
    name: str, run: str, config: dict, stop: dict, seed: int, out: Path, env: str = ENV
) -> list[dict[str, str]]:
    """One ``train.py`` run (on the corridor unless ``env``); its progress.csv rows."""
    experiment = {name: {"run": run, "env": env, "stop": stop, "config": config}}
    path = out / f"{name}-{seed}.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    results = out / f"{name}-{seed}"
    _command("train.py", "-f", str(path), "--seed", str(seed), "--local-dir", str(results))
    (progress,) = results.glob("*/*/progress.csv")
    return list(csv.DictReader(progress.open()))


def run(
    variant: str,
    seed: int,
    args: argparse.Namespace,
    out: Path,
    keys: dict | None = None,
    game: Game | None = None,
) -> dict:
    """One PPO run (``keys``: its reward_signals and cloning, else VARIANTS's; on ``game``, else the
    corridor); its curve, first step at the target, and last signal columns."""
    own = keys or {"reward_signals": VARIANTS[variant]}
    game = game or corridor(args)
    config = {**game.ppo, "env_config": game.env_config, **own}
    started = time.perf_counter()
    rows = train(variant, "PPO", config, {STEPS: args.budget}, seed, out, game.env)
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
    same file, on ``--game``: the report's lines."""
    from unity_bridge.demo_files import read_demo

    game = pyramids(args, out) if args.game == "pyramids" else corridor(args)
    demo = out / "expert.demo"
    setting = json.dumps(game.env_config)
    _command(
        "rollout.py",
        "--env",
        game.env,
        "--env-config",
        setting,
        "--policy",
        game.expert,
        "--episodes",
        str(game.episodes),
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
            runs.append({**run(tag, seed, args, out, keys, game), "variant": name})
            steps = next((steps for steps, ret in runs[-1]["curve"] if ret >= goal), None)
            print(
                f"{name} seed {seed}: final return {runs[-1]['final']:.2f}, {goal:.2f} at {steps or '-'} env"
                f" steps, {runs[-1]['wall']:.0f} s",
                flush=True,
            )
        bc = {"input": str(demo), "env_config": game.env_config, "lr": 1e-3, "evaluation_interval": 1,
              "evaluation_duration": 20, "evaluation_duration_unit": "episodes",
              "train_batch_size_per_learner": 256, "dataset_num_iters_per_learner": 40}  # fmt: skip
        started = time.perf_counter()
        rows = train("bc", "BC", bc, {"training_iteration": 5}, seed, out, game.offline_env)
        offline.append(float(rows[-1]["evaluation/env_runners/episode_return_mean"]))
        wall = time.perf_counter() - started
        print(f"offline BC seed {seed}: return {offline[-1]:.2f}, {wall:.0f} s", flush=True)
    seeds = " ".join(map(str, args.seeds))
    if args.game == "pyramids":
        ppo = game.ppo
        lines = [
            "### reward_signals: imitation on the Unity stand-in's Pyramids (`env: unity`),"
            f" {datetime.date.today()}",
            f"Machine: {machine()}. `python benchmarks/reward_signals.py --part imitation --game pyramids"
            f" --seeds {seeds} --budget {args.budget}`. The game: `python -m unity_bridge.standin build`'s"
            " Pyramids (one agent in a room of 9 cells; pressing the switch shows the golden brick, +2 on"
            " reaching it, -0.001 a step, 60 steps an episode). The expert: `rollout.py --env unity"
            " --env-config '{file_name: .../Pyramids, no_graphics: true}' --policy"
            f" tests/data/demos/pyramids_expert.py:play --episodes {game.episodes} --out expert.demo` (to"
            f" the switch, press it, to the brick; mean return {best:.2f}). PPO alone against PPO with"
            " `gail` (strength 0.01, use_actions) and `behavioral_cloning` (strength 1.0, num_epoch 16,"
            " annealed over half the budget), the same PPO settings (one game in train.py's process,"
            f" train_batch_size {ppo['train_batch_size']}, minibatch_size {ppo['minibatch_size']},"
            f" num_epochs {ppo['num_epochs']}, lr {ppo['lr']}, entropy_coeff {ppo['entropy_coeff']}, 2x64);"
            f" solved: the first iteration whose mean return reaches 0.9 of the expert's ({goal:.2f})."
            " Offline: `run: BC` with `input: expert.demo` on the same game as `env: unity-single` (RLlib"
            " 2.60 reads no multi-agent episodes offline), 5 iterations, its evaluation's mean return"
            " over 20 episodes.",
        ]
    else:
        lines = [
            f"### reward_signals: imitation on the switch corridor ({args.length} cells),"
            f" {datetime.date.today()}",
            f"Machine: {machine()}. `python benchmarks/reward_signals.py --part imitation --seeds"
            f" {seeds} --budget {args.budget} --length {args.length}`. The expert:"
            " `rollout.py --policy sparse_corridor.py:expert --episodes 10 --out expert.demo` (the shortest"
            f" way; mean return {best:.2f}). PPO alone against PPO with `gail` (strength 0.01, use_actions)"
            " and `behavioral_cloning` (strength 1.0, num_epoch 16, annealed over half the budget), the same"
            " PPO settings;"
            f" solved: the first iteration whose mean return reaches 0.9 of the expert's ({goal:.2f})."
            " Offline: `run: BC` with `input: expert.demo`, 5 iterations, its evaluation's mean return"
            " over 20 episodes.",
        ]
    lines += [
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
    p.add_argument(
        "--game", choices=("corridor", "pyramids"), default="corridor",
        help="the imitation part's game: the switch corridor, or the Unity stand-in's Pyramids",
    )  # fmt: skip
    p.add_argument(
        "--build", type=Path, default=None,
        help="with --game pyramids: the stand-in's Pyramids player (or a folder of stand-in builds);"
        " default: written into a temporary folder",
    )  # fmt: skip
    p.add_argument("--no-append", action="store_true", help="print the sections, leave RESULTS.md alone")
    args = p.parse_args()
    if args.game != "corridor" and args.part != "imitation":
        p.error("--game applies to --part imitation alone")
    report = (lambda lines: print("\n".join(lines))) if args.no_append else append_results
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("signals", "both"):
            report(signals(args, Path(tmp)))
        if args.part in ("imitation", "both"):
            report(imitation(args, Path(tmp)))


if __name__ == "__main__":
    main()
