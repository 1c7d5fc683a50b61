"""Reward curves (PNG) from a trial's progress.csv."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from envsdk.progress import STEPS, mean_return


def read_progress(trial_dir: Path) -> list[dict[str, float]]:
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
                    }
                )
            except ValueError:
                continue
    return rows


def plot_reward_curve(trial_dir: Path, title: str = "") -> Path | None:
    """Write ``reward.png`` (return against env steps and wall time)."""
    rows = [r for r in read_progress(trial_dir) if not math.isnan(r["return"])]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
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
    plt.close(fig)
    return out
