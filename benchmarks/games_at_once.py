"""Several games in one env runner, stepped at once (substitution ``games-at-once``) against one
after another (RLlib's vector envs; ``ENVSDK_STOCK=games-at-once``).

configs/unity-chase.yaml's PPO through RLlib's multi-agent path (``env: unity``) on the stand-in Chase
with 12 agents per game, ``num_envs_per_env_runner`` games in train.py's own env runner (no Ray), 1,000
env steps per iteration; each game's frame costs ``--frame-ms`` of the player's CPU (0: the stand-in's
own cost, a fraction of a millisecond; a Unity game's physics and rendering cost more).  Each seed runs
both ways, alternating which goes first; agent steps per second of the runner's sampling time and of
the whole iteration, from progress.csv over the iterations after the first, medians over the seeds.
Writes a table into benchmarks/RESULTS.md.

    python benchmarks/games_at_once.py [--games 4] [--frame-ms 0 2] [--iterations 4] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine
from multiagent import CONFIG, alternating, chase_build

AGENTS = 12
SETTINGS = {"num_env_runners": 0, "train_batch_size": 1000, "minibatch_size": 250, "num_epochs": 4}
SWITCH = "games-at-once"


def game_args(builds: Path, games: int, frame_ms: float) -> list[str]:
    extra = f"['--agents', '{AGENTS}', '--max-steps', '30', '--frame-ms', '{frame_ms}']"
    return ["-f", str(CONFIG), "--env", "unity", *(f"--config.{k}={v}" for k, v in SETTINGS.items()),
            f"--config.num_envs_per_env_runner={games}",
            f"--config.env_config.file_name={builds / 'Chase'}",
            f"--config.env_config.additional_args={extra}"]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--games", type=int, default=4)
    p.add_argument("--frame-ms", type=float, nargs="+", default=[0.0, 2.0])
    p.add_argument("--iterations", type=int, default=4)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        builds = chase_build(Path(tmp))
        for frame_ms in args.frame_ms:
            game = game_args(builds, args.games, frame_ms)
            ways = {"at once": {"ENVSDK_STOCK": ""}, "in turn": {"ENVSDK_STOCK": SWITCH}}
            folder = Path(tmp) / f"frame-{frame_ms:g}"
            runs = alternating(game, args.iterations, args.seeds, folder, f"frame {frame_ms:g} ms", ways)
            sampled = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
            whole = {k: statistics.median(r[1] for r in v) for k, v in runs.items()}
            rows.append(
                f"| {frame_ms:g} | {sampled['at once']:.0f} | {sampled['in turn']:.0f} |"
                f" {sampled['at once'] / sampled['in turn']:.2f}x | {whole['at once']:.0f} |"
                f" {whole['in turn']:.0f} | {whole['at once'] / whole['in turn']:.2f}x |"
            )
    append_results(
        [
            f"### games_at_once: {args.games} games in one env runner, stepped at once and in turn,"
            f" {datetime.date.today()}",
            f"Machine: {machine()}. `python benchmarks/games_at_once.py --games {args.games} --frame-ms"
            f" {' '.join(f'{f:g}' for f in args.frame_ms)} --iterations {args.iterations} --seeds"
            f" {' '.join(map(str, args.seeds))}`. {CONFIG.relative_to(ROOT)}'s PPO with `env: unity`,"
            f" the stand-in Chase with {AGENTS} agents per game, {args.games} games in train.py's env runner"
            " (num_env_runners 0, no Ray), 1,000 env steps per iteration; each frame busy for the given"
            " CPU time in its player. Agent steps per second of the sampling time and of the whole"
            " iteration, iterations after the first, medians over the seeds; each seed both ways,"
            f" alternating. In turn: `ENVSDK_STOCK={SWITCH}` (RLlib's vector env).",
            "",
            "| frame CPU (ms) | sampled, at once | sampled, in turn | gain | trained, at once"
            " | trained, in turn | gain |",
            "|---|---|---|---|---|---|---|",
            *rows,
        ]
    )


if __name__ == "__main__":
    main()
