"""Agent steps per second through RLlib's multi-agent path: the Unity stand-in with 1 and 16
agents, and a PettingZoo Parallel game.

configs/unity-chase.yaml's PPO through RLlib's multi-agent path (``env: unity``, one remote env
runner, 1,000 steps per iteration: :data:`SETTINGS`, whatever the shipped file samples with), with
``--agents 1`` and ``--agents 16``, and PettingZoo's knights_archers_zombies_v11
(4 agents, a Parallel env) by name with the same settings: agent steps sampled
per second of the env runner's sampling time, and agent steps per second of the
whole iteration (sampling + learning), from progress.csv over the iterations
after the first.  Beside them, the same game stepped in this process with
random actions (no protocol, no RLlib): the ceiling.  Also the number of progress.csv columns
the run wrote (RLlib reports some metrics per agent id, and Unity gives an
agent a new id every episode).  Each seed runs twice, alternating, like for like: as shipped
(both through the agents-batched loop: the Unity game's lives, the PettingZoo game's rounds as
RLlib's episodes), and with ``ENVSDK_STOCK=1``: RLlib's own multi-agent runner, every substitution
off.  Writes a table into benchmarks/RESULTS.md.

    python benchmarks/multiagent.py [--iterations 5] [--seeds 0 1 2]
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
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

from unity_bridge.standin.build import BUILDS, write_build
from unity_bridge.standin.game import make_game

CONFIG = ROOT / "configs" / "unity-chase.yaml"
AGENTS = (1, 16)
PETTINGZOO_CONFIG = {"max_cycles": 200}  # the PettingZoo game's env_config
# Both games' runner and batch (the figures in RESULTS.md since 2026-11-23 were taken with these)
SETTINGS = {"num_env_runners": 1, "train_batch_size": 1000, "minibatch_size": 250, "num_epochs": 8}


def chase_rate(agents: int, seconds: float = 2.0) -> float:
    """Agent steps per second of the stand-in game alone, random legal actions, every agent every frame."""
    game = make_game("chase", agents=agents, seed=0, decision_period=1, max_steps=30, actions="discrete")
    game.reset()
    rng = np.random.default_rng(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        reports = game.reports()  # each asking agent's observation (and the finished ones')
        actions = {}
        for r in reports:
            if not r.agent.done:
                allowed = np.flatnonzero(~r.mask) if r.mask is not None else np.arange(3)
                actions[r.agent.slot] = (np.zeros(0, np.float32), np.array([rng.choice(allowed)]))
        game.after_report()
        game.step(actions)
        steps += len(reports)
    return steps / (time.perf_counter() - start)


def pettingzoo_rate(seconds: float = 2.0) -> float:
    """Agent steps per second of the PettingZoo game alone, random actions, every live agent."""
    from pettingzoo.butterfly import knights_archers_zombies_v11

    env = knights_archers_zombies_v11.parallel_env(**PETTINGZOO_CONFIG)
    env.reset(seed=0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        if not env.agents:
            env.reset()
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        env.step(actions)
        steps += len(actions)
    return steps / (time.perf_counter() - start)


def chase_build(folder: Path) -> Path:
    """The stand-in's Chase build, written into folder/builds; that folder."""
    builds = folder / "builds"
    write_build(builds, "Chase", BUILDS["Chase"])
    return builds


def chase_args(agents: int, builds: Path) -> list[str]:
    extra = f"['--agents', '{agents}', '--max-steps', '30']"
    return ["-f", str(CONFIG), "--env", "unity", *(f"--config.{k}={v}" for k, v in SETTINGS.items()),
            f"--config.env_config.file_name={builds / 'Chase'}",
            f"--config.env_config.additional_args={extra}"]  # fmt: skip


def pettingzoo_args(folder: Path) -> list[str]:
    """The PettingZoo game by name, with unity-chase.yaml's algorithm and the runner and batch settings."""
    shipped = next(iter(yaml.safe_load(CONFIG.read_text()).values()))
    experiment = {
        "kaz": {
            "run": shipped["run"],
            "env": "pettingzoo.butterfly.knights_archers_zombies_v11",
            "config": {
                "env_config": PETTINGZOO_CONFIG,
                **SETTINGS,
            },
        }
    }
    path = folder / "kaz.yaml"
    path.write_text(yaml.safe_dump(experiment))
    return ["-f", str(path)]


def rllib_rates(
    game: list[str], iterations: int, seed: int, folder: Path, switches: dict[str, str]
) -> tuple[float, float, int]:
    """(sampled agent steps/s of sampling time, agent steps/s of iteration time, progress.csv columns)
    of train.py with the arguments ``game``, with the environment's ``switches`` (``ENVSDK_STOCK``,
    ``ENVSDK_NO_PATCHES``) set."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *game, "--stop-iters", str(iterations),
         "--stop-reward", "1000", f"--config.seed={seed}", "--local-dir", str(folder / "results")],
        cwd=ROOT, capture_output=True, text=True, timeout=1200, env={**os.environ, **switches},
    )  # fmt: skip
    if proc.returncode != 0:
        raise SystemExit(f"train.py failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    (progress,) = folder.glob("results/*/*/progress.csv")
    with progress.open() as fh:
        rows = list(csv.DictReader(fh))
    columns = len(rows[0])
    later = rows[1:]  # the first iteration pays for start-up
    agent_steps = [
        sum(float(v) for k, v in r.items() if k.startswith("env_runners/num_module_steps_sampled/") and v)
        for r in later
    ]
    sampling = sum(float(r["timers/env_runner_sampling_timer"]) for r in later)
    total = sum(float(r["time_this_iter_s"]) for r in later)
    return sum(agent_steps) / sampling, sum(agent_steps) / total, columns


Rates = tuple[float, float, int]  # what rllib_rates returns


Ways = dict[str, dict[str, str]]  # a way to run, by name -> its environment switches


def alternating(
    game: list[str], iterations: int, seeds: list[int], folder: Path, label: str, ways: Ways
) -> dict[str, list[Rates]]:
    """:func:`rllib_rates` of each seed run each way (by name: its environment switches), alternating
    which goes first from seed to seed; medians over seeds are taken by the caller."""
    runs: dict[str, list[Rates]] = {way: [] for way in ways}
    for i, seed in enumerate(seeds):
        for way in list(ways) if i % 2 == 0 else list(ways)[::-1]:
            run_folder = folder / f"s{seed}-{way.replace(' ', '-')}"
            runs[way].append(rllib_rates(game, iterations, seed, run_folder, ways[way]))
            print(f"{label}, seed {seed}, {way}: {runs[way][-1][0]:.0f} sampled/s", flush=True)
    return runs


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=5)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        builds = chase_build(Path(tmp))
        games = {
            **{
                f"Unity stand-in (Chase) | {n}": (chase_args(n, builds), lambda n=n: chase_rate(n))
                for n in AGENTS
            },
            "PettingZoo Parallel (knights_archers_zombies_v11) | 4": (
                pettingzoo_args(Path(tmp)),
                pettingzoo_rate,
            ),
        }
        for name, (game, ceiling_rate) in games.items():
            ways = {"ours": {"ENVSDK_STOCK": ""}, "rllib": {"ENVSDK_STOCK": "1"}}
            label = f"{name.replace(' | ', ', ')} agents"
            runs = alternating(game, args.iterations, args.seeds, Path(tmp) / str(len(rows)), label, ways)
            ceiling = ceiling_rate()
            sampled = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
            whole = {k: statistics.median(r[1] for r in v) for k, v in runs.items()}
            columns = max(r[2] for r in runs["ours"])
            rows.append(
                f"| {name} | {sampled['ours']:.0f} | {sampled['rllib']:.0f} | "
                f"{sampled['ours'] / sampled['rllib']:.2f}x | {whole['ours']:.0f} | {whole['rllib']:.0f} | "
                f"{ceiling:.0f} | {ceiling / sampled['ours']:.0f}x | {columns} |"
            )
    append_results(
        [
            "### multiagent: agent steps per second on the Unity stand-in and a PettingZoo game "
            "through RLlib, "
            f"{datetime.date.today()}",
            f"Machine: {machine()}. `python benchmarks/multiagent.py --iterations {args.iterations} --seeds "
            f"{' '.join(map(str, args.seeds))}`. {CONFIG.relative_to(ROOT)}'s PPO (env: unity, one remote env"
            " runner, train_batch_size 1000) with the stand-in's `--agents N`, and PettingZoo's "
            "knights_archers_zombies_v11 (max_cycles 200) by name with the same settings; medians over the "
            "seeds, iterations "
            "after the first. Sampled: agent steps per second of the env runner's sampling time. "
            "Trained: agent steps per second of the whole iteration. In-process: the game alone. "
            "Each seed as shipped (the agents-batched loop: Unity's agent lives, PettingZoo's rounds) "
            "and with `ENVSDK_STOCK=1` (RLlib's "
            "own multi-agent runner, every substitution off), alternating, same seeds and iterations.",
            "",
            "| game | agents | sampled | sampled, RLlib's | gain | trained | trained, RLlib's "
            "| in-process game | game / sampled | progress.csv columns |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


if __name__ == "__main__":
    main()
