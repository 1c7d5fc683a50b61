"""What each speed-up of envsdk.speedups buys: each measured in fresh processes, with every
speed-up on and with that one off (``ENVSDK_NO_PATCHES=<name>``), in alternating rounds.

- connector-frames: milliseconds spent in connector pieces' constructors while
  configs/cartpole-ppo.yaml's Algorithm is built (the part of the build it changes);
- polyak-in-place: env steps per second of configs/pendulum-sac.yaml (an update every step);
- fused-adam: env steps per second of configs/cartpole-ppo.yaml (20 epochs an iteration);
- finite-check-once: env steps per second of configs/pendulum-sac.yaml (19 gradients an update);
- episodes-converted-once: measured by benchmarks/multiagent.py, on and off, where it acts
  (a remote runner sampling many agents' short episodes).

Writes a table into benchmarks/RESULTS.md.

    python benchmarks/speedups.py [--repeats 3] [--only finite-check-once ...]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, env_steps_per_second, machine

MEASURES = {  # speed-up -> (what is measured, config, higher is better)
    "connector-frames": ("connectors", "cartpole-ppo.yaml", False),
    "polyak-in-place": ("steps", "pendulum-sac.yaml", True),
    "fused-adam": ("steps", "cartpole-ppo.yaml", True),
    "finite-check-once": ("steps", "pendulum-sac.yaml", True),
}


def child(what: str, config: str) -> float:
    """One measurement in this (fresh) process."""
    path = ROOT / "configs" / config
    if what == "steps":
        return env_steps_per_second(path, {})
    from ray.rllib.connectors.connector_v2 import ConnectorV2

    from envsdk import speedups
    from envsdk.config.experiment import load_experiments
    from envsdk.internals import without_object_store
    from envsdk.substitutions import Stock
    from envsdk.training.build import build_config

    spent = [0.0]
    construct = ConnectorV2.__init__

    def timed(self: ConnectorV2, *args: object, **kwargs: object) -> None:
        start = time.perf_counter()
        construct(self, *args, **kwargs)
        spent[0] += time.perf_counter() - start

    ConnectorV2.__init__ = timed  # type: ignore[method-assign]
    speedups.install(Stock.resolve())  # as train.py does
    built = build_config(load_experiments(path)[0], {})
    with without_object_store():
        built.algo_class(config=built.config).stop()
    return spent[0] * 1000


def measure(what: str, config: str, off: str) -> float:
    env = {**os.environ, "ENVSDK_NO_PATCHES": off, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, __file__, "--child", what, config],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--only", nargs="+", choices=list(MEASURES), default=list(MEASURES), help="only these")
    p.add_argument("--child", nargs=2, metavar=("WHAT", "CONFIG"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    rows: list[str] = []
    for name in args.only:
        what, config, higher = MEASURES[name]
        runs: dict[str, list[float]] = {"on": [], "off": []}
        for i in range(args.repeats):
            for which in ("on", "off") if i % 2 == 0 else ("off", "on"):
                runs[which].append(measure(what, config, name if which == "off" else ""))
        on, off = float(np.median(runs["on"])), float(np.median(runs["off"]))
        gain = on / off if higher else off / on
        unit = "env steps/s" if what == "steps" else "ms in connector constructors while building"
        # one bold block per speed-up: the results page keeps each one's newest run (report.py),
        # so a run of some (--only) leaves the others' figures on it
        each = {which: ", ".join(f"{v:,.2f}" for v in values) for which, values in runs.items()}
        rows += [
            f"**{name}**",
            "",
            "| measured | without it | with it | gain | runs (without / with) |",
            "|---|---|---|---|---|",
            f"| {config}: {unit} | {off:,.2f} | {on:,.2f} | {gain:.2f}x | {each['off']} / {each['on']} |",
            "",
        ]
    append_results(
        [
            f"### speedups: what each speed-up of envsdk.speedups buys, {datetime.date.today()}",
            f"Machine: {machine()}. `python benchmarks/speedups.py {' '.join(sys.argv[1:])}`: each figure"
            " from a fresh process (OMP_NUM_THREADS=1), every speed-up on, or all but the one named off"
            " (ENVSDK_NO_PATCHES=name); medians of alternating rounds.",
            "",
            *rows,
        ]
    )


if __name__ == "__main__":
    main()
