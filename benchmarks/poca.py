"""MA-POCA on a cooperative game where one agent must give itself up: run: POCA against per-agent PPO
with the group reward summed into each member's, and against mlagents-learn 1.1.0's own POCA.

The game is the stand-in's DungeonEscape (``unity_bridge/standin/teams.py``): teams of three in one
group; one member must walk onto the dragon, which removes it from the group (its episode ends
with nothing), before two others can open the door together for the group's +1.  Only a critic that
sees the group credits the sacrifice: per-agent PPO sees a step into the dragon end an episode with
0.  Four areas (12 agents) in one player, ``--max-steps 50``, a dungeon of 5 cells (random play
escapes about a fifth of the rounds and slays the dragon in nine of ten).

The settings are one mlagents-learn trainer config (:data:`SETTINGS`; ``trainer_type`` poca, or ppo
for the per-agent side), given unchanged to ``train.py`` and to ``mlagents-learn``, as a user would;
``max_steps`` (:data:`BUDGET` agent steps) ends a run that has not reached the target.  The learning
rate is 1e-3: at 3e-4 POCA, too, stopped sacrificing before it had learnt that it pays (seed 1, 200k
agent steps, 2026-11-28).
The target is the rate of escaped rounds (:data:`TARGET`): ours reads the game's own
``DungeonEscape/Escaped`` stat per summary (progress.csv), mlagents-learn's summary line its "Mean
Group Reward" (the group reward of each round's last members: 1 when they escaped, else 0); each
summary is ``summary_freq`` agent steps on both sides.

* ``--part credit``: POCA and PPO (ours both), each seed: agent steps to the target (a run that does
  not reach it counts with the agent steps it ran: the budget).  Target: POCA's median at
  most 0.7 of PPO's.
* ``--part mlagents``: ours and mlagents-learn with trainer_type poca, alternating pairs, seconds from
  launch to the first summary at the target (a run that does not reach it in ``--cap`` counts with
  the time it ran).  Target: ours at most 0.7 of theirs, median of the pairs.

    python benchmarks/poca.py [--part credit|mlagents|both] [--seeds 1 2 3] [--target 0.7]
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine
from mlagents_configs import mlagents_summaries, ours_summaries, run
from unity_vs_mlagents import mlagents_venv

from unity_bridge.standin.build import write_build

GAME = "DungeonEscape"
PLAYER = ["--game", "dungeonescape", "--agents", "4", "--max-steps", "50"]
ESCAPED = "env_runners/unity/DungeonEscape/Escaped"
TARGET = 0.7
GROUP = re.compile(r"\. Step: (\d+)\. .*?Mean Group Reward: (-?\d+(?:\.\d+)?)")
SUMMARY_STEPS = 4096
BUDGET = 400_000  # agent steps: a run that has not reached the target by then stops (max_steps)
SETTINGS: dict[str, Any] = {
    "behaviors": {
        GAME: {
            "trainer_type": "poca",
            "hyperparameters": {
                "batch_size": 512,
                "buffer_size": SUMMARY_STEPS,
                "learning_rate": 0.001,
                "beta": 0.01,
                "epsilon": 0.2,
                "lambd": 0.95,
                "num_epoch": 3,
                "learning_rate_schedule": "constant",
                "beta_schedule": "constant",
                "epsilon_schedule": "constant",
            },
            "network_settings": {"normalize": False, "hidden_units": 64, "num_layers": 2},
            "reward_signals": {"extrinsic": {"gamma": 0.99, "strength": 1.0}},
            "max_steps": BUDGET,
            "time_horizon": 64,
            "summary_freq": SUMMARY_STEPS,
        }
    },
    "environment_parameters": {"dungeon_length": 5},
}


def settings_file(folder: Path, trainer: str) -> Path:
    data = yaml.safe_load(yaml.safe_dump(SETTINGS))
    data["behaviors"][GAME]["trainer_type"] = trainer
    path = folder / f"{GAME}.{trainer}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def one(
    side: str, trainer: str, seed: int, root: Path, target: float, cap: float, learn: Path | None
) -> dict:
    folder = root / f"{side}-{trainer}-{seed}"
    write_build(folder / "builds", GAME, PLAYER)
    config = settings_file(folder, trainer)
    port = ["--base-port", str(6300 + 10 * (seed % 50) + (5 if side == "mlagents" else 0))]
    common = [
        "--no-graphics",
        f"--run-id=r{seed}",
        f"--results-dir={folder / 'results'}",
        f"--seed={seed}",
        *port,
    ]
    if side == "ours":
        command = [
            sys.executable,
            str(ROOT / "train.py"),
            str(config),
            f"--env={folder / 'builds' / GAME}",
            *common,
        ]
        found = ours_summaries(folder / "results" / f"r{seed}", ESCAPED)
    else:
        assert learn is not None
        command = [str(learn), str(config), f"--env={folder / 'builds' / f'{GAME}.x86_64'}", *common]
        found = mlagents_summaries(folder / "log.txt", GROUP)
    result = run(command, folder, found, target, cap)
    state = "reached" if result["solved"] else "NOT reached"
    print(
        f"{side} {trainer} seed {seed}: {state} in {result['wall']:.1f} s, {result['steps']} agent steps"
        f" (escaped {result['reward']:.2f})",
        flush=True,
    )
    return {**result, "seed": seed}


def credit(seeds: list[int], target: float, cap: float, root: Path) -> list[str]:
    runs: dict[str, list[dict]] = {"poca": [], "ppo": []}
    for seed in seeds:
        for trainer in ("poca", "ppo") if seed % 2 else ("ppo", "poca"):
            runs[trainer].append(one("ours", trainer, seed, root, target, cap, None))
    lines = [
        f"### poca: MA-POCA on the DungeonEscape stand-in, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`. One"
        " mlagents-learn trainer config for both (trainer_type poca / ppo; buffer 4,096 agent steps, batch"
        " 512, 3 epochs, lr 1e-3, beta 0.01, 2x64, gamma 0.99, lambd 0.95, dungeon of 5 cells), through"
        " train.py; 4 areas of 3 agents; PPO's members each get the group reward. A run that did not"
        f" reach the target counts with the agent steps it ran (max_steps {BUDGET:,}; cap {cap:.0f} s).",
        "",
        f"**POCA against per-agent PPO: agent steps to {target:g} of rounds escaped**",
        "",
        "| seed | POCA: agent steps | POCA: s | PPO: agent steps | PPO: s | ratio |",
        "|---|---|---|---|---|---|",
    ]

    def cell(r: dict) -> str:
        return f"{r['steps']}" if r["solved"] else f"not reached ({r['steps']})"

    for p, q in zip(runs["poca"], runs["ppo"], strict=True):
        ratio = p["steps"] / max(1, q["steps"])
        lines.append(
            f"| {p['seed']} | {cell(p)} | {p['wall']:.0f} | {cell(q)} | {q['wall']:.0f} | {ratio:.2f} |"
        )
    median = {k: statistics.median(r["steps"] for r in rs) for k, rs in runs.items()}
    lines += [
        "",
        f"Median agent steps: POCA {median['poca']:.0f}, PPO {median['ppo']:.0f}; ratio"
        f" {median['poca'] / median['ppo']:.2f} (target: <= 0.7).",
    ]
    return lines


def versus_mlagents(seeds: list[int], target: float, cap: float, root: Path, learn: Path) -> list[str]:
    runs: dict[str, list[dict]] = {"ours": [], "mlagents": []}
    for i, seed in enumerate(seeds):
        for side in ("ours", "mlagents") if i % 2 == 0 else ("mlagents", "ours"):
            runs[side].append(
                one(side, "poca", seed, root, target, cap, learn if side == "mlagents" else None)
            )
    lines = [
        f"### poca: MA-POCA on the DungeonEscape stand-in, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`. The same"
        " trainer config file on both sides; each timed from launch to its first summary (4,096 agent"
        " steps) at the target.",
        "",
        f"**train.py against mlagents-learn 1.1.0, both trainer_type poca: seconds to {target:g} of rounds"
        " escaped**",
        "",
        "| seed | ours: s | ours: agent steps | mlagents-learn: s | mlagents-learn: agent steps | ratio |",
        "|---|---|---|---|---|---|",
    ]

    def cell(r: dict) -> str:
        return f"{r['wall']:.1f}" if r["solved"] else f"not reached ({r['wall']:.0f})"

    for o, t in zip(runs["ours"], runs["mlagents"], strict=True):
        ratio = o["wall"] / t["wall"]
        lines.append(f"| {o['seed']} | {cell(o)} | {o['steps']} | {cell(t)} | {t['steps']} | {ratio:.2f} |")
    median = statistics.median(
        o["wall"] / t["wall"] for o, t in zip(runs["ours"], runs["mlagents"], strict=True)
    )
    lines += ["", f"Median ratio ours/mlagents-learn: {median:.2f} (target: <= 0.7)."]
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("credit", "mlagents", "both"), default="both")
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--target", type=float, default=TARGET)
    p.add_argument("--cap", type=float, default=600.0, help="seconds per run")
    p.add_argument("--mlagents-venv", type=Path, default=Path.home() / ".cache" / "envsdk" / "mlagents-1.1.0")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("credit", "both"):
            append_results(credit(args.seeds, args.target, args.cap, Path(tmp) / "credit"))
        if args.part in ("mlagents", "both"):
            learn = mlagents_venv(args.mlagents_venv)
            append_results(versus_mlagents(args.seeds, args.target, args.cap, Path(tmp) / "mlagents", learn))


if __name__ == "__main__":
    main()
