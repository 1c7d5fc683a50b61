"""What every benchmark shares: the machine line and the RESULTS.md writer."""

from __future__ import annotations

import functools
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from report import RESULTS
from report import ROOT as ROOT  # the benchmarks' shared root
from report import write as write_page

HEADER = "# Benchmark results\n\nEach section is written by the benchmark named in its title.\n\n"


@functools.cache
def machine() -> str:
    """The machine line: cores, CPU name, Python, and two speed figures measured on the spot.

    Machines sold under one CPU name ran the same benchmark 2.2 times apart (2026-11-26), so the
    name alone does not say whether two runs in RESULTS.md can be compared; the figures do.
    """
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    gflops, loops = speed_reference()
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}; reference speed: "
        f"{gflops:.0f} GFLOP/s (256x256 float32 matmul, one thread), {loops:.0f}M Python loop steps/s"
    )


def speed_reference(seconds: float = 0.3) -> tuple[float, float]:
    """One thread's float32 matmul rate (GFLOP/s) and a plain Python loop's (million steps/s),
    the best of three rounds of about ``seconds`` each."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    rounds = max(1, int(seconds / 0.002))
    best = [0.0, 0.0]
    try:
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(rounds):
                torch.mm(a, b)
            best[0] = max(best[0], 2 * 256**3 * rounds / (time.perf_counter() - start) / 1e9)
            start, total = time.perf_counter(), 0
            for i in range(1_000_000):
                total += i
            best[1] = max(best[1], 1.0 / (time.perf_counter() - start))
    finally:
        torch.set_num_threads(threads)
    return best[0], best[1]


def append_results(lines: list[str]) -> None:
    """Print a benchmark's section, append it to RESULTS.md and refresh docs/performance.md's figures."""
    text = "\n".join(lines) + "\n"
    print(text)
    old = RESULTS.read_text() if RESULTS.exists() else HEADER
    RESULTS.write_text(old.rstrip() + "\n\n" + text)
    write_page()


def env_steps_per_second(
    config_file: Path, overrides: dict, algo_class: Any = None, iterations: int = 4, learner_class: Any = None
) -> float:
    """Env steps per second of ``iterations`` training iterations of a config, in this process, no Ray.

    The first two iterations (start-up, the replay warm-up of off-policy configs) are not timed.
    ``algo_class`` and ``learner_class`` replace the ones train.py would use (to time RLlib's own).
    """
    from envsdk import speedups
    from envsdk.config.experiment import load_experiments
    from envsdk.internals import without_object_store
    from envsdk.substitutions import Stock
    from envsdk.training.build import build_config

    speedups.install(Stock.resolve())  # as train.py does, before it builds the config (ENVSDK_STOCK applies)
    built = build_config(load_experiments(config_file)[0], overrides)
    if learner_class is not None:
        built.config.training(learner_class=learner_class)
    with without_object_store():
        algo = (algo_class or built.algo_class)(config=built.config)
        algo.train()
        steps = algo.train()["num_env_steps_sampled_lifetime"]
        start = time.perf_counter()
        for _ in range(iterations):
            result = algo.train()
        rate = (result["num_env_steps_sampled_lifetime"] - steps) / (time.perf_counter() - start)
        algo.stop()
    return float(rate)


def run_sb3_worker(script: str, args: list[str]) -> tuple[dict, float]:
    """Run ``script --sb3-worker ARGS`` (a benchmark's SB3 side) as a whole process; returns the
    JSON report it prints last and its wall time, with the report's ``curve`` times (seconds since
    its own start, ``exit_at`` its exit) moved onto the process clock."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, script, "--sb3-worker", *args], capture_output=True, text=True, cwd=ROOT
    )
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"SB3 run failed (pip install -e '.[bench]'?):\n{proc.stderr[-2500:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    offset = wall - report["exit_at"]
    report["curve"] = [(*point[:-2], point[-2] + offset, point[-1]) for point in report["curve"]]
    return report, wall
