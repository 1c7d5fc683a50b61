"""Reward curves (PNG) from a trial's progress.csv."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path
from typing import Any

from envsdk.progress import SELF_PLAY, STEPS, mean_return

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


def plot_reward_curve(trial_dir: Path, title: str = "") -> Path | None:
    """Write ``reward.png``: return against env steps and wall time, and self-play's ELO in a third panel."""
    rows = [r for r in read_progress(trial_dir) if not math.isnan(r["return"])]
    if not rows:
        return None
    from matplotlib.figure import Figure  # not pyplot: no GUI backend to pick, a third faster to import

    policies = sorted({p for r in rows for p in r["elo"]})
    fig = Figure(figsize=(15 if policies else 10, 3.6))
    axes = fig.subplots(1, 3 if policies else 2)
    ax1, ax2 = axes[0], axes[1]
    ax2.sharey(ax1)
    if policies:
        ax3 = axes[2]
        for policy in policies:
            points = [(r["steps"], r["elo"][policy]) for r in rows if policy in r["elo"]]
            ax3.plot([s for s, _ in points], [e for _, e in points], label=policy)
        ax3.set_xlabel("env steps")
        ax3.set_ylabel("ELO (self-play)")
        ax3.legend(fontsize=8)
        ax3.grid(alpha=0.3)
    ax1.plot([r["steps"] for r in rows], [r["return"] for r in rows], color="tab:blue")
    ax1.set_xlabel("env steps")
    ax1.set_ylabel("mean episode return")
    ax2.plot([r["time"] for r in rows], [r["return"] for r in rows], color="tab:orange")
    ax2.set_xlabel("wall time (s)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
    fig.suptitle(title or Path(trial_dir).name, fontsize=10)
    fig.tight_layout()
    out = Path(trial_dir) / "reward.png"
    fig.savefig(out, dpi=100)
    return out
