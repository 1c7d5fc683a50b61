"""A Unity game trained to a target: train.py against Unity's own mlagents-learn, on the same player.

The player is the stand-in's Chase (one agent walks to a target; a solved episode returns about
0.95), the same executable for both. Each side is one whole process, timed from launch:

* ours: ``python train.py -f configs/unity-chase.yaml --seed S``, as shipped (its stop is the
  mean return of the last 100 episodes at 0.85), timed to its exit;
* mlagents-learn 1.1.0 with PPO settings taken from the same YAML (buffer = train_batch_size,
  batch = minibatch_size, epochs, learning rate, gamma, lambda, clip, entropy, 2x256 layers,
  time scale, the player's arguments), timed to the summary line whose mean reward first reaches
  the target (mlagents-learn has no stop on reward; it is then interrupted).  Its mean is over the
  episodes of the last ``summary_freq`` steps (1,000), about 35 episodes: a shorter window than
  ours, which favours it.

Pairs alternate which side runs first.  mlagents-learn does not install on Python 3.11; the
benchmark makes a side venv for it (``--mlagents-venv``) with ``pip install --no-deps
--ignore-requires-python mlagents==1.1.0 mlagents-envs==1.1.0``, the protobuf and numpy
releases it was written for (numpy 1.23 still has ``np.float``/``np.bool``), and this venv's
torch through a ``.pth`` file.

    python benchmarks/unity_vs_mlagents.py [--pairs 3] [--target 0.85]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import re
import signal
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

from unity_bridge.standin.build import BUILDS, write_build

CONFIG = ROOT / "configs" / "unity-chase.yaml"
RETURN = "env_runners/episode_return_mean"
MLAGENTS = ["mlagents==1.1.0", "mlagents-envs==1.1.0"]
# What mlagents 1.1.0 imports, at releases it runs with on Python 3.11 (its own pins say 3.10).
MLAGENTS_DEPS = [
    "protobuf==3.20.3", "numpy==1.23.5", "grpcio==1.85.3", "h5py==3.16.0", "Pillow==13.0.0",
    "pyyaml==6.0.3", "six==1.17.0", "attrs==26.1.0", "cattrs==1.5.0", "cloudpickle==3.1.3",
    "filelock==4.3.1", "tensorboard==2.20.0", "onnx==1.15.0",
]  # fmt: skip
# mlagents 1.1.0 exports its .onnx with torch.onnx.export as torch had it then (TorchScript); torch
# 2.9 and later default to the dynamo exporter, which needs onnxscript, and mlagents-learn fails at its
# last step.  Loaded at start-up in the side venv (after the .pth that finds torch): the old default.
ONNX_DEFAULT = """import functools

import torch.onnx

_export = torch.onnx.export


@functools.wraps(_export)
def export(*args, **kwargs):
    kwargs.setdefault("dynamo", False)
    return _export(*args, **kwargs)


torch.onnx.export = export
"""
SUMMARY = re.compile(r"\. Step: (\d+)\. Time Elapsed: [\d.]+ s\. Mean Reward: (-?\d+(?:\.\d+)?)")


def mlagents_venv(folder: Path) -> Path:
    """The side venv's ``mlagents-learn``, made on first use."""
    learn = folder / "bin" / "mlagents-learn"
    pip = [str(folder / "bin" / "python"), "-m", "pip", "install", "-q"]
    if not learn.exists():
        print(f"making a venv for mlagents-learn in {folder} ...", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
        subprocess.run([*pip, "--no-deps", "--ignore-requires-python", *MLAGENTS], check=True)
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    found = subprocess.run(
        [str(folder / "bin" / "python"), "-c", purelib], check=True, capture_output=True, text=True
    )
    site = Path(found.stdout.strip())
    if not (site / "zzz_envsdk_onnx.pth").exists():  # also a venv made before the exporter's default
        subprocess.run([*pip, *MLAGENTS_DEPS], check=True)
        # torch (and what else mlagents needs and this venv has) from here, after the venv's own pins
        (site / "zz_envsdk_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        (site / "envsdk_onnx_default.py").write_text(ONNX_DEFAULT)
        (site / "zzz_envsdk_onnx.pth").write_text("import envsdk_onnx_default\n")
    return learn


def trainer_config(shipped: dict[str, Any]) -> dict[str, Any]:
    """mlagents-learn's settings for the Chase behavior, from the shipped YAML's (RLlib's defaults
    where the YAML leaves one out)."""
    config = shipped["config"]
    hidden = (config.get("model_config") or {}).get("fcnet_hiddens", [256, 256])
    return {
        "behaviors": {
            "Chase": {
                "trainer_type": "ppo",
                "hyperparameters": {
                    "batch_size": config["minibatch_size"],
                    "buffer_size": config["train_batch_size"],
                    "learning_rate": config["lr"],
                    "beta": config.get("entropy_coeff", 0.0),
                    "epsilon": config.get("clip_param", 0.3),
                    "lambd": config.get("lambda_", 1.0),
                    "num_epoch": config["num_epochs"],
                    "learning_rate_schedule": "constant",
                },
                "network_settings": {
                    "normalize": False,
                    "hidden_units": hidden[0],
                    "num_layers": len(hidden),
                },
                "reward_signals": {"extrinsic": {"gamma": config["gamma"], "strength": 1.0}},
                "max_steps": 500_000,
                "time_horizon": 64,
                "summary_freq": 1000,
            }
        }
    }


def run_ours(seed: int, folder: Path, cap: float, target: float) -> dict[str, Any]:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", str(CONFIG), "--seed", str(seed),
         "--local-dir", str(folder / "ours"), "--stop-time", str(cap)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "ENVSDK_PLAYER_PATH": str(folder)},
    )  # fmt: skip
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"train.py failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    (progress,) = (folder / "ours").glob("*/*/progress.csv")
    rows = list(csv.DictReader(progress.open()))
    reached = [r for r in rows if float(r[RETURN] or "-inf") >= target]
    last = (reached or rows)[0 if reached else -1]
    return {
        "wall": wall, "solved": bool(reached), "steps": int(float(last["num_env_steps_sampled_lifetime"])),
        "train_s": float(last["time_total_s"]),
    }  # fmt: skip


def run_mlagents(learn: Path, seed: int, folder: Path, cap: float, target: float) -> dict[str, Any]:
    shipped = next(iter(yaml.safe_load(CONFIG.read_text()).values()))
    env_config = shipped["config"]["env_config"]
    settings = folder / "chase-mlagents.yaml"
    settings.write_text(yaml.safe_dump(trainer_config(shipped)))
    command = [
        str(learn), str(settings), f"--env={folder / 'builds' / 'Chase.x86_64'}", f"--run-id=s{seed}",
        f"--seed={seed}", "--force", f"--results-dir={folder / 'mlagents'}",
        f"--time-scale={env_config.get('time_scale', 20)}", "--base-port", str(6000 + seed % 1000),
        *(["--no-graphics"] if env_config.get("no_graphics") else []),
        "--env-args", *map(str, env_config.get("additional_args", [])),
    ]  # fmt: skip
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=folder)
    assert proc.stdout is not None
    reached: tuple[float, int] | None = None
    tail: list[str] = []
    for line in proc.stdout:
        tail = [*tail[-40:], line]
        found = SUMMARY.search(line)
        if found and float(found.group(2)) >= target:
            reached = (time.perf_counter() - start, int(found.group(1)))
            break
        if time.perf_counter() - start > cap:
            break
    proc.send_signal(signal.SIGINT)  # mlagents-learn saves its model and exits
    try:
        proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
    exit_s = time.perf_counter() - start
    if reached is None:
        print("".join(tail[-20:]), file=sys.stderr)
    return {
        "wall": reached[0] if reached else exit_s, "solved": reached is not None,
        "steps": reached[1] if reached else None, "exit": exit_s,
    }  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--target", type=float, default=0.85)
    p.add_argument("--cap", type=float, default=300.0, help="seconds per run")
    p.add_argument("--mlagents-venv", type=Path, default=Path.home() / ".cache" / "envsdk" / "mlagents-1.1.0")
    args = p.parse_args()
    target = args.target
    learn = mlagents_venv(args.mlagents_venv)
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "mlagents": []}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.pairs):
            seed = 1 + pair
            sides = ("ours", "mlagents") if pair % 2 == 0 else ("mlagents", "ours")
            for side in sides:
                folder = Path(tmp) / f"{side}-{seed}"
                write_build(folder / "builds", "Chase", BUILDS["Chase"])
                print(f"{side} seed {seed} ...", end=" ", flush=True)
                run = (
                    run_ours(seed, folder, args.cap, target)
                    if side == "ours"
                    else run_mlagents(learn, seed, folder, args.cap, target)
                )
                runs[side].append(run)
                state = "reached" if run["solved"] else "NOT reached"
                print(f"{state} in {run['wall']:.1f} s, {run['steps']} steps")
    lines = [
        f"### unity_vs_mlagents: Chase to {target:g}, train.py vs mlagents-learn 1.1.0,"
        f" {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`."
        " Same stand-in player; PPO settings of configs/unity-chase.yaml on both sides. Ours: whole"
        " process to exit; mlagents-learn: launch to the summary line that first reaches the target.",
        "",
        "| pair (seed) | ours: wall (s) | ours: env steps | ours: training (s) | mlagents-learn: wall (s)"
        " | mlagents-learn: env steps | ratio |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, (ours, theirs) in enumerate(zip(runs["ours"], runs["mlagents"], strict=True)):

        def cell(r: dict[str, Any]) -> str:
            return f"{r['wall']:.1f}" if r["solved"] else f"not reached ({r['wall']:.0f})"

        ratio = f"{ours['wall'] / theirs['wall']:.2f}" if ours["solved"] and theirs["solved"] else "-"
        lines.append(
            f"| {i + 1} ({i + 1}) | {cell(ours)} | {ours['steps']} | {ours['train_s']:.1f} | {cell(theirs)}"
            f" | {theirs['steps']} | {ratio} |"
        )
    both = [
        (o, t) for o, t in zip(runs["ours"], runs["mlagents"], strict=True) if o["solved"] and t["solved"]
    ]
    if both:
        median = statistics.median(o["wall"] / t["wall"] for o, t in both)
        lines += [
            "",
            f"Median ratio ours/mlagents-learn over {len(both)} pairs: {median:.2f} (target: <= 0.7).",
        ]
    append_results(lines)


if __name__ == "__main__":
    main()
