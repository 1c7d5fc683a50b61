"""docs/performance.md shows the newest run of each benchmark, as benchmarks/report.py writes it."""

from __future__ import annotations

import sys

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from report import BEGIN, END, existing_benchmarks, render, sections

DIARY = """# Benchmark results

### speed: env steps per second, 2026-01-01
Machine: old box. `python benchmarks/speed.py`.

| env | steps/s |
|---|---|
| A | 10 |

### gone: a retired benchmark, 2026-01-02
Machine: old box.

retired figures

### suite: time to solve, 2026-01-03
Machine: box 1. `python benchmarks/suite.py`.

**CartPole** (target 475)

cartpole run 1

**Pendulum** (target -200)

pendulum run 1

Ratios of medians: CartPole 0.7, Pendulum 0.8.

### speed: env steps per second, 2026-01-04
Machine: new box. `python benchmarks/speed.py --fast`.

| env | steps/s |
|---|---|
| A | 20 |

### suite: time to solve, 2026-01-05
Machine: box 2. `python benchmarks/suite.py --tasks CartPole`.

**CartPole** (target 475)

cartpole run 2

Ratios of medians: CartPole 0.6.
"""


def test_the_performance_page_is_current_with_the_results_diary():
    page = (ROOT / "docs" / "performance.md").read_text()
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    generated = page[page.index(BEGIN) : page.index(END) + len(END)] + "\n"
    assert generated == render(results, existing_benchmarks()), "run python benchmarks/report.py"


def test_every_diary_section_is_read():
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    assert len(sections(results)) == results.count("\n### ")
    assert all(section.machine.startswith("Machine:") for section in sections(results))


def test_the_newest_run_of_each_benchmark_and_the_newest_block_of_each_title():
    text = render(DIARY, {"speed", "suite"})
    assert "| A | 20 |" in text and "| A | 10 |" not in text
    assert "Run of 2026-01-04. Machine: new box. `python benchmarks/speed.py --fast`." in text
    assert "retired figures" not in text and "### gone" not in text
    # CartPole from the newest suite run, Pendulum from the one before, each under its own run's line
    cartpole, pendulum = text.index("cartpole run 2"), text.index("pendulum run 1")
    assert "cartpole run 1" not in text
    assert text.rindex("Run of 2026-01-05", 0, cartpole) < cartpole
    assert text.rindex("Run of 2026-01-03", 0, pendulum) > text.index("cartpole run 2")
    # a run's closing summary belongs to none of its blocks
    assert "Ratios" not in text
    assert text.index("### speed") < text.index("### suite")
