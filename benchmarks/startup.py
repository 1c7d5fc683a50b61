"""The fixed cost of a train.py run: in-process single trial against the same trial under Tune.

Runs ``train.py -f configs/cartpole-ppo.yaml --stop-iters 1`` as a whole
process, once as shipped (one trial: trained in train.py's process) and once
with ``max_failures: 1`` added, which sends the same trial through Ray Tune
(an actor of its own).  One iteration is ~0.3 s of training, so the wall
time is nearly all start-up and shut-down.  Median of ``--repeats`` runs
each, alternating; writes a table into benchmarks/RESULTS.md.

    python benchmarks/startup.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

CONFIG = ROOT / "configs" / "cartpole-ppo.yaml"


def timed_run(config: Path, results: Path) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", str(config), "--stop-iters", "1",
         "--local-dir", str(results)],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"train.py failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return wall


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tune_config = Path(tmp) / "cartpole-ppo-tune.yaml"
        doc = yaml.safe_load(CONFIG.read_text())
        next(iter(doc.values()))["max_failures"] = 1
        tune_config.write_text(yaml.safe_dump(doc))
        walls: dict[str, list[float]] = {"in-process": [], "Tune": []}
        for i in range(args.repeats):
            for path, config in (("in-process", CONFIG), ("Tune", tune_config)):
                walls[path].append(timed_run(config, Path(tmp) / f"{path}-{i}"))
                print(f"{path} run {i + 1}: {walls[path][-1]:.1f} s", flush=True)
    med = {k: statistics.median(v) for k, v in walls.items()}
    lines = [
        f"### startup: one-iteration run of {CONFIG.relative_to(ROOT)}, in-process vs Tune, "
        f"{datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/startup.py --repeats {args.repeats}`. Whole "
        "`train.py --stop-iters 1` process, launch to exit (Python, imports, Ray start, one "
        "iteration, checkpoint, plot, Ray shut-down); the Tune run is the same trial with "
        "`max_failures: 1`, which routes it through Tune.",
        "",
        "| path | runs (s) | median (s) |",
        "|---|---|---|",
        *(f"| {k} | {', '.join(f'{w:.1f}' for w in v)} | {med[k]:.1f} |" for k, v in walls.items()),
        "",
        f"The in-process path saves {med['Tune'] - med['in-process']:.1f} s per run.",
    ]
    append_results(lines)


if __name__ == "__main__":
    main()
