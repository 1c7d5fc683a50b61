"""``python -m unity_bridge.standin build [DIR]``: write stand-in "player builds".

Each build is an executable ``NAME.x86_64`` that starts the stand-in player
with this Python, so the bridge launches it exactly as it launches a Unity
player (same path handling, same arguments).  In ``builds/`` by default: ``Chase.x86_64``,
``Dodgeball.x86_64``, ``SeekWatch.x86_64`` and ML-Agents' example games (``3DBall.x86_64``, ...:
``standin/examples.py``).
"""

from __future__ import annotations

import argparse
import shlex
import stat
import sys
from pathlib import Path

BUILDS = {
    "Chase": ["--game", "chase"],
    "Dodgeball": ["--game", "dodgeball", "--agents", "2"],
    "SeekWatch": ["--game", "seekwatch"],
    # ML-Agents' example games (standin/examples.py), named as its trainer configs name them.
    "3DBall": ["--game", "3dball", "--agents", "12", "--max-steps", "40"],
    "3DBallHard": ["--game", "3dballhard", "--agents", "12", "--max-steps", "40"],
    "GridWorld": ["--game", "gridworld", "--agents", "9", "--visual", "32", "--visual-channels", "3"],
    "WallJump": ["--game", "walljump", "--max-steps", "40"],
    "Hallway": ["--game", "hallway", "--visual", "16"],
    "PushBlock": ["--game", "pushblock", "--max-steps", "40"],
    "Pyramids": ["--game", "pyramids", "--max-steps", "60"],
    "SoccerTwos": ["--game", "soccertwos", "--agents", "2", "--max-steps", "40"],
    "StrikersVsGoalie": ["--game", "strikersvsgoalie", "--max-steps", "40"],
    "Sorter": ["--game", "sorter", "--max-steps", "60"],
    # Cooperative groups (standin/teams.py), for ML-Agents' POCA configs.
    "DungeonEscape": ["--game", "dungeonescape", "--max-steps", "50"],
    "PushBlockCollab": ["--game", "pushblockcollab", "--max-steps", "50"],
}


def write_build(folder: Path, name: str, args: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.x86_64"
    command = shlex.join([sys.executable, "-m", "unity_bridge.standin.player", *args])
    path.write_text(
        "#!/bin/sh\n"
        "# Stand-in Unity ML-Agents player written by `python -m unity_bridge.standin build`.\n"
        "# Takes a Unity player's arguments (-nographics, --mlagents-port, -logFile, ...).\n"
        f'exec {command} "$@"\n'
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m unity_bridge.standin", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="write the stand-in builds")
    build.add_argument("folder", nargs="?", default="builds", type=Path)
    args = parser.parse_args(argv)
    for name, game_args in BUILDS.items():
        print(f"wrote {write_build(args.folder, name, game_args)}")
    return 0
