"""Reward curves (PNG) from a trial's progress.csv."""

from __future__ import annotations

import contextlib
import csv
import json
import math
import re
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

from envsdk.progress import SELF_PLAY, STEPS, mean_return
from envsdk.training.report import reward_figure
from envsdk.training.report.reward_figure import draw

ELO_COLUMN = re.compile(rf"^{SELF_PLAY}/(.+)/elo$")
SIGNAL_COLUMN = re.compile(r"^learners/(.+)/reward_signals/(.+)/reward_mean$")  # ppo/signals.py's


def read_progress(trial_dir: Path) -> list[dict[str, Any]]:
    """Per iteration: env steps, wall time, mean return, (self-play) ``elo``: policy -> rating, and
    (reward signals) ``signals``: "policy signal" -> its mean reward per step, times its strength."""
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
                        "signals": {
                            f"{m.group(1)} {m.group(2)}": float(v)
                            for k, v in row.items()
                            if (m := SIGNAL_COLUMN.match(k or "")) and v
                        },
                    }
                )
            except ValueError:
                continue
    return rows


class Painter:
    """A process that draws the reward figures of a train.py run, started before its first trial.

    Drawing in the training process means importing matplotlib at the end of
    a trial, on the critical path; a process per trial pays that import again
    for each experiment of a file.  The painter (``reward_figure.py`` run as a
    script) imports it once, on an idle core while the first trial trains, and
    then draws each trial's figure as it ends.  If it cannot draw (it died, or
    was killed with the process group), the figure is drawn here instead.
    Leaving the ``with`` block ends it either way.
    """

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Painter:
        with contextlib.suppress(OSError):  # no interpreter to start (an embedded Python): drawn here
            self._proc = subprocess.Popen(
                # -P: the script's folder (envsdk/training) stays off sys.path; its modules would shadow
                [sys.executable, "-P", reward_figure.__file__],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self._end()

    def _end(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            proc.communicate(timeout=5)  # stdin closed: it exits
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()

    def paint(self, rows: list[dict[str, Any]], title: str, out: Path) -> bool:
        """Have the painter draw ``out``; False if it could not (then it is ended, and the next
        figures are drawn here too)."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdout is None:
            return False
        job = json.dumps({"rows": rows, "title": title, "out": str(out)}) + "\n"
        try:
            proc.stdin.write(job.encode())
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            answer = proc.stdout.readline().decode().strip() if ready else ""
        except OSError:  # it died: a broken pipe
            answer = ""
        if answer == reward_figure.DRAWN and out.is_file():
            return True
        self._end()
        return False


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
