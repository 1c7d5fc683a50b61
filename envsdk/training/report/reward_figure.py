"""The reward figure (PNG) drawn from rows already read; run as a script, the process that draws it.

This module imports nothing from envsdk, so that ``python reward_figure.py``
starts in a fraction of a second without RLlib.  ``plots.Painter`` starts it
once per train.py run, before the first trial: it imports matplotlib on an
idle core while the trial trains, then draws each trial's figure from a JSON
job (one line on its stdin) and answers each with a line on its stdout.  Its
stdin closed, it exits.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any, BinaryIO

DRAWN = "drawn"  # the answer to a job whose figure is written


def draw(rows: list[dict[str, Any]], title: str, out: Path | BinaryIO) -> None:
    """Return against env steps and wall time; self-play's ELO and the reward signals' rewards in
    panels of their own when rows carry them.

    ``rows``: per iteration, ``steps``, ``time``, ``return``, ``elo`` (policy -> rating) and
    ``signals`` ("policy signal" -> mean reward per step; absent in older jobs).
    """
    from matplotlib.figure import Figure  # not pyplot: no GUI backend to pick, a third faster to import

    extra = [
        (key, label)
        for key, label in (("elo", "ELO (self-play)"), ("signals", "reward per step (reward signals)"))
        if any(r.get(key) for r in rows)
    ]
    fig = Figure(figsize=(5 * (2 + len(extra)), 3.6))
    axes = fig.subplots(1, 2 + len(extra))
    ax1, ax2 = axes[0], axes[1]
    ax2.sharey(ax1)
    for ax, (key, label) in zip(axes[2:], extra, strict=True):
        for name in sorted({n for r in rows for n in r.get(key, {})}):
            points = [(r["steps"], r[key][name]) for r in rows if name in r.get(key, {})]
            ax.plot([s for s, _ in points], [v for _, v in points], label=name)
        ax.set_xlabel("env steps")
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    ax1.plot([r["steps"] for r in rows], [r["return"] for r in rows], color="tab:blue")
    ax1.set_xlabel("env steps")
    ax1.set_ylabel("mean episode return")
    ax2.plot([r["time"] for r in rows], [r["return"] for r in rows], color="tab:orange")
    ax2.set_xlabel("wall time (s)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=100, format="png")


def _serve() -> None:
    # Ctrl-C reaches the whole foreground process group; train.py answers the first one by
    # checkpointing and stopping, and still wants its figure.  Its own exit closes our stdin.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # What this process is started early to do: import matplotlib and draw once (fonts, PNG writer).
    draw([{"steps": 0, "time": 0, "return": 0, "elo": {}}], "", io.BytesIO())
    for line in sys.stdin:
        job = json.loads(line)
        try:
            draw(job["rows"], job["title"], Path(job["out"]))
            answer = DRAWN
        except Exception as err:  # the caller draws it then, and says why if it fails there too
            answer = f"{type(err).__name__}: {err}".replace("\n", " ")
        sys.stdout.write(answer + "\n")
        sys.stdout.flush()
    os._exit(0)  # every figure is written and closed; the interpreter's teardown is time for nothing


if __name__ == "__main__":
    _serve()
