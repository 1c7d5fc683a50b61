"""What every benchmark shares: the machine line and the RESULTS.md writer."""

from __future__ import annotations

import os
import platform
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
HEADER = "# Benchmark results\n\nEach section is written by the benchmark named in its title.\n\n"


def machine() -> str:
    cpu = next(
        (
            ln.split(":", 1)[1].strip()
            for ln in Path("/proc/cpuinfo").read_text().splitlines()
            if ln.startswith("model name")
        ),
        platform.processor(),
    )
    return f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}"


def append_results(lines: list[str]) -> None:
    """Print a benchmark's section and append it to RESULTS.md."""
    text = "\n".join(lines) + "\n"
    print(text)
    old = RESULTS.read_text() if RESULTS.exists() else HEADER
    RESULTS.write_text(old.rstrip() + "\n\n" + text)
