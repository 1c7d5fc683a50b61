"""Reward curves (PNG) from a trial's progress.csv."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from envsdk.progress import SELF_PLAY, STEPS, mean_return
from envsdk.training import reward_figure
from envsdk.training.reward_figure import draw

ELO_COLUMN = re.compile(rf"^{SELF_PLAY}/(.+)/elo$")


def read_progress(trial_dir: Path) -> list[dict[str, Any]]:
    """Per iteration: env steps, wall time, mean return and (self-play) ``elo``: policy -> rating."""
    path = Path(trial_dir) / "progress.csv"
    if not path.is_file():
        return []
    rows = []
    with path.open() as fh:
        for row in csv.DictReader(fh):
            try:
                rows.append(
                    {
                        "steps": float(row.get(STEPS) or 0),
                        "time": float(row.get("time_total_s") or 0),
                        "return": math.nan if (ret := mean_return(row)) is None else ret,
                        "elo": {
                            m.group(1): float(v)
                            for k, v in row.items()
                            if (m := ELO_COLUMN.match(k or "")) and v
                        },
                    }
                )
            except ValueError:
                continue
    return rows


class Painter:
    """A process that draws a trial's reward figure, started as the trial begins.

    Drawing in the training process means importing matplotlib at the end of
    the run, on the critical path.  The painter
    (``reward_figure.py`` run as a script) does that import on an idle core
    while the trial trains.  If it cannot draw (it died, or was killed with the
    process group), the figure is drawn here instead.  Leaving the ``with``
    block ends it either way.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Painter:
        with contextlib.suppress(OSError):  # no interpreter to start (an embedded Python): drawn here
            self._proc = subprocess.Popen(
                # -P: the script's folder (envsdk/training) stays off sys.path; its modules would shadow
                [sys.executable, "-P", reward_figure.__file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _finish(proc, None, timeout=5)  # stdin closed with no job: it exits

    def paint(self, rows: list[dict[str, Any]], title: str, out: Path) -> bool:
        """Have the painter draw ``out``; False if it could not (then nothing of it is left running)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return False
        _finish(proc, json.dumps({"rows": rows, "title": title, "out": str(out)}).encode(), timeout=60)
        return proc.returncode == 0 and out.is_file()


def _finish(proc: subprocess.Popen[bytes], job: bytes | None, timeout: float) -> None:
    """Send ``job`` (if any), close the painter's stdin and wait for it to exit; killed if it will not."""
    try:
        proc.communicate(job, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()


def plot_reward_curve(trial_dir: Path, title: str = "", painter: Painter | None = None) -> Path | None:
    """Write ``reward.png``: return against env steps and wall time, and self-play's ELO in a third panel.

    With a ``painter`` (started as the trial began), the figure is drawn in its process.
    """
    rows = [r for r in read_progress(trial_dir) if not math.isnan(r["return"])]
    if not rows:
        return None
    out = Path(trial_dir) / "reward.png"
    title = title or Path(trial_dir).name
    if painter is None or not painter.paint(rows, title, out):
        draw(rows, title, out)
    return out
