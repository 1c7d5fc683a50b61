"""Learning on the ecosystem's environments, from the shipped configs as users run them.

* MiniGrid-Empty-5x5 (``configs/minigrid-ppo.yaml``, the env named by its id): env steps and
  seconds until the mean return of the last 20 episodes reaches 0.8, and the return at the stop.
* Tic-tac-toe self-play (``configs/tictactoe-selfplay.yaml``, PettingZoo's module named in the
  YAML): the trained policy against uniform random play, as each player (``rollout.py
  --opponent random --team 0/1``), and PettingZoo's own "illegal move" messages counted over
  training and evaluation (there must be none: the action mask is honoured).

Each run is a whole ``train.py`` process; seeds are the benchmark's, not the ones the configs
were written against (their settings were not tuned on seeds 100+).  Writes a section into
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import ROOT, append_results, machine

RETURN = "env_runners/episode_return_mean"


def _train(config: str, seed: int, folder: Path) -> tuple[subprocess.CompletedProcess, float, list[dict]]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", config, "--seed", str(seed), "--local-dir", folder],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{config} seed {seed} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    progress = next(folder.glob("*/*/progress.csv"))
    return proc, wall, list(csv.DictReader(progress.open()))


def minigrid(seed: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        _, wall, rows = _train("configs/minigrid-ppo.yaml", seed, Path(tmp))
    reached = [r for r in rows if float(r[RETURN] or "nan") >= 0.8]
    first = reached[0] if reached else None
    return {
        "seed": seed,
        "steps": int(float(first["num_env_steps_sampled_lifetime"])) if first else None,
        "time": float(first["time_total_s"]) if first else None,
        "final": float(rows[-1][RETURN]),
        "wall": wall,
    }


def tictactoe(seed: int, games: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        proc, wall, _ = _train("configs/tictactoe-selfplay.yaml", seed, Path(tmp))
        illegal = len(re.findall("illegal", proc.stdout + proc.stderr, re.I))
        wins = {}
        for team in (0, 1):
            out = subprocess.run(
                [
                    sys.executable, str(ROOT / "rollout.py"), Path(tmp) / "tictactoe-selfplay",
                    "--episodes", str(games), "--opponent", "random", "--team", str(team), "--no-out",
                    "--seed", str(seed),
                ],
                capture_output=True, text=True, cwd=ROOT,
            )  # fmt: skip
            found = re.search(r"(\d+) wins, (\d+) draws, (\d+) losses in (\d+) games", out.stdout)
            if out.returncode != 0 or found is None:
                raise SystemExit(f"rollout failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
            illegal += len(re.findall("illegal", out.stdout + out.stderr, re.I))
            wins[team] = tuple(int(g) for g in found.groups())
    return {"seed": seed, "wins": wins, "illegal": illegal, "wall": wall}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])
    p.add_argument("--games", type=int, default=200, help="tic-tac-toe games against random, per side")
    args = p.parse_args()

    grid = [minigrid(seed) for seed in args.seeds]
    for run in grid:
        print(f"minigrid seed {run['seed']}: 0.8 after {run['steps']} steps, final {run['final']:.2f}")
    games = [tictactoe(seed, args.games) for seed in args.seeds]
    for run in games:
        print(f"tictactoe seed {run['seed']}: {run['wins']}, illegal messages {run['illegal']}")

    grid_rows = [
        f"| {r['seed']} | {r['steps'] if r['steps'] is not None else 'not reached'} | "
        f"{'-' if r['time'] is None else round(r['time'], 1)} | {r['final']:.2f} | {r['wall']:.0f} |"
        for r in grid
    ]

    def rate(result: tuple[int, ...]) -> float:
        return result[0] / result[3]

    game_rows = [
        f"| {r['seed']} | {rate(r['wins'][0]):.2f} ({r['wins'][0][0]}/{r['wins'][0][1]}/{r['wins'][0][2]}) | "
        f"{rate(r['wins'][1]):.2f} ({r['wins'][1][0]}/{r['wins'][1][1]}/{r['wins'][1][2]}) | "
        f"{(rate(r['wins'][0]) + rate(r['wins'][1])) / 2:.2f} | {r['illegal']} | {r['wall']:.0f} |"
        for r in games
    ]
    both = statistics.median((rate(r["wins"][0]) + rate(r["wins"][1])) / 2 for r in games)
    append_results(
        [
            f"### ecosystem: learning on MiniGrid and PettingZoo tic-tac-toe, {datetime.date.today()}",
            f"Machine: {machine()}. `python benchmarks/ecosystem.py --seeds {' '.join(map(str, args.seeds))} "
            f"--games {args.games}`: the shipped configs, whole train.py processes.",
            "",
            "MiniGrid-Empty-5x5-v0 (`configs/minigrid-ppo.yaml`): when the mean return of the last 20 "
            "episodes first reached 0.8.",
            "",
            "| seed | env steps to 0.8 | training seconds to 0.8 | return at the stop | process seconds |",
            "|---|---|---|---|---|",
            *grid_rows,
            "",
            "Tic-tac-toe self-play (`configs/tictactoe-selfplay.yaml`, 60 iterations): win rate against "
            f"uniform random moves over {args.games} games per side (wins/draws/losses), and PettingZoo's "
            "'illegal move' messages in training and evaluation.",
            "",
            "| seed | as player 1 (moves first) | as player 2 | both sides | illegal moves "
            "| process seconds |",
            "|---|---|---|---|---|---|",
            *game_rows,
            "",
            f"Median win rate over both sides: {both:.2f}.",
        ]
    )


if __name__ == "__main__":
    main()
