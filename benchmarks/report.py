"""The figures of docs/performance.md, generated from benchmarks/RESULTS.md.

RESULTS.md is a diary: every run of every benchmark appends a dated section
(``### name: title, date``).  The performance page shows the newest of them:
one section per benchmark that still exists in ``benchmarks/``, and, where a
section holds several bold-titled blocks (the solve suite's tasks), the newest
block of each title, with the date, machine and command of the run it came from.

``append_results`` calls :func:`write` after each run, so the page never lags
the diary; ``python benchmarks/report.py`` rewrites it by hand and
``--check`` exits 1 when the page is stale (tests/project/test_benchmark_report.py).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
PAGE = ROOT / "docs" / "performance.md"
BEGIN = "<!-- figures:begin (benchmarks/report.py writes this part from benchmarks/RESULTS.md) -->"
END = "<!-- figures:end -->"
HEADING = re.compile(r"^### (?P<name>[\w-]+): (?P<title>.*), (?P<date>\d{4}-\d{2}-\d{2})$")
BLOCK = re.compile(r"^\*\*(?P<title>[^*]+)\*\*")
# The closing line of a run with blocks, about that run's blocks together (solve_suite.py writes it).
SUMMARY = "Ratios of "


@dataclass(frozen=True, kw_only=True)
class Section:
    """One run of one benchmark, as RESULTS.md records it."""

    name: str
    title: str
    date: str
    machine: str  # the run's "Machine: ..." line (machine and command)
    body: list[str]  # the lines after it


def sections(text: str) -> list[Section]:
    """RESULTS.md's sections in file order (oldest first)."""
    found: list[Section] = []
    for chunk in re.split(r"\n(?=### )", text):
        lines = chunk.strip("\n").splitlines()
        head = HEADING.match(lines[0]) if lines else None
        if head is None:
            continue
        rest = lines[1:]
        machine = rest[0] if rest and rest[0].startswith("Machine:") else ""
        body = rest[1:] if machine else rest
        while body and not body[0].strip():
            body = body[1:]
        found.append(
            Section(name=head["name"], title=head["title"], date=head["date"], machine=machine, body=body)
        )
    return found


def blocks(body: list[str]) -> dict[str, list[str]]:
    """A body's bold-titled blocks (none where it has no bold titles), each with its lines.

    A run's closing :data:`SUMMARY` line belongs to no block and is left out.
    """
    titled: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in body:
        match = BLOCK.match(line)
        if match:
            current = titled.setdefault(match["title"].strip(), [])
        if line.startswith(SUMMARY):
            current = None
        elif current is not None:
            current.append(line)
    for lines in titled.values():
        while lines and not lines[-1].strip():
            lines.pop()
    return titled


def render(results_text: str, benchmarks: set[str]) -> str:
    """The page's generated part: the newest figures of each benchmark named in ``benchmarks``."""
    newest: dict[str, Section] = {}
    newest_block: dict[tuple[str, str], tuple[Section, list[str]]] = {}
    for section in sections(results_text):
        if section.name not in benchmarks:
            continue
        newest[section.name] = section
        for title, lines in blocks(section.body).items():
            newest_block[(section.name, title)] = (section, lines)
    out = [BEGIN, ""]
    for name in sorted(newest):
        section = newest[name]
        own = [(source, lines) for (n, _), (source, lines) in newest_block.items() if n == name]
        out += [f"### {name}: {section.title}", ""]
        for source, lines in own or [(section, section.body)]:
            out += [f"Run of {source.date}. {source.machine}", "", *lines, ""]
    out += ["The whole diary, every run of every benchmark: [Benchmark results](results.md).", "", END]
    return "\n".join(line.rstrip() for line in out) + "\n"


def existing_benchmarks() -> set[str]:
    """The benchmarks that still have a script here; a retired one's old sections stay in the diary only."""
    return {path.stem for path in (ROOT / "benchmarks").glob("*.py")} - {"common", "report"}


def page_with(page: str, generated: str) -> str:
    before, found, rest = page.partition(BEGIN)
    if not found:
        raise SystemExit(f"{PAGE} has no '{BEGIN}' marker")
    after = rest.split(END, 1)[1]
    return before + generated.rstrip("\n") + after


def write(check: bool = False) -> bool:
    """Rewrite the page's figures; with ``check``, only say whether they are current."""
    page = PAGE.read_text()
    wanted = page_with(page, render(RESULTS.read_text(), existing_benchmarks()))
    if check:
        return wanted == page
    PAGE.write_text(wanted)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the page lags RESULTS.md")
    args = parser.parse_args(argv)
    if write(check=args.check):
        return 0
    print(f"{PAGE.relative_to(ROOT)} lags RESULTS.md: run python benchmarks/report.py", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
