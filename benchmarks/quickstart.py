"""The README's quick-start output, produced by its command: ``make train`` (train.py on
configs/cartpole-ppo.yaml, as shipped) run several times; the median run's last lines and the
spread over all runs are written between the README's ``quickstart`` markers, with the machine
and the date.  ``tests/project/test_quickstart.py`` checks that a fresh run still lands in that spread.
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
import subprocess
import sys
import tempfile
import time

from common import ROOT, machine

README = ROOT / "README.md"
BEGIN, END = (
    "<!-- quickstart:begin (benchmarks/quickstart.py writes this block) -->",
    "<!-- quickstart:end -->",
)
DONE = re.compile(r"^done: cartpole-ppo: return ([\d.]+) after ([\d,]+) env steps \((\d+)s\)$", re.M)
SPREAD = re.compile(r"env steps: (\d+)-(\d+); training seconds: (\d+)-(\d+)")


def one_run() -> tuple[str, int, int, float]:
    """(output, env steps, training seconds, process seconds) of one ``make train``-like run."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        out = subprocess.run(
            [sys.executable, str(ROOT / "train.py"), "-f", "configs/cartpole-ppo.yaml", "--local-dir", tmp],
            capture_output=True, text=True, cwd=ROOT,
        )  # fmt: skip
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise SystemExit(f"train.py failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
        found = DONE.search(out.stdout)
        assert found, out.stdout[-2000:]
        text = out.stdout.replace(tmp, "~/ray_results")
        return text, int(found.group(2).replace(",", "")), int(found.group(3)), wall


def _block(text: str) -> str:
    """The lines a user sees at the end: the first progress line, then from ``done:`` on, paths shortened."""
    lines = text.strip().splitlines()
    first = next(ln for ln in lines if ln.startswith("[cartpole-ppo] iter 1 "))
    tail = lines[next(i for i, ln in enumerate(lines) if ln.startswith("done:")) :]
    return "\n".join([first, *(re.sub(r"(PPO_CartPole-v1_)[^/\s]+", r"\1...", ln) for ln in tail)])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=12)
    args = p.parse_args()
    runs = [one_run() for _ in range(args.runs)]
    for _, steps, seconds, wall in runs:
        print(f"{steps} env steps, {seconds} s of training, {wall:.1f} s in all")
    median = sorted(runs, key=lambda r: r[1])[len(runs) // 2]
    steps = [r[1] for r in runs]
    seconds = [r[2] for r in runs]
    block = "\n".join(
        [
            BEGIN,
            "```",
            _block(median[0]),
            "```",
            "",
            f"Over {args.runs} runs of that command ({datetime.date.today()}, {machine()}): env steps:"
            f" {min(steps)}-{max(steps)}; training seconds: {min(seconds)}-{max(seconds)}; the whole"
            f" command {min(r[3] for r in runs):.0f}-{max(r[3] for r in runs):.0f} s once installed"
            f" (median {statistics.median(steps):,.0f} steps). The runs are not seeded, as `make train`"
            " is not: each draws its own.",
            END,
        ]
    )
    text = README.read_text()
    start, end = text.index(BEGIN), text.index(END) + len(END)
    README.write_text(text[:start] + block + text[end:])
    print(block)


if __name__ == "__main__":
    main()
