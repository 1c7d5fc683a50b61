"""What a training run produced, and the summary train.py prints about it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from envsdk.progress import fmt_duration


@dataclass
class Outcome:
    """What one experiment produced."""

    name: str
    experiment_dir: Path
    trial_dir: Path | None
    best_checkpoint: Path | None
    best_return: float | None
    steps: int
    seconds: float
    plot: Path | None
    errors: list[str]
    interrupted: str | None = None  # the signal that stopped the run, if one did


def print_summary(out: Outcome, resume_command: str | None = None) -> None:
    ret = f"{out.best_return:.1f}" if out.best_return is not None else "-"
    state = f"stopped by {out.interrupted}" if out.interrupted else "done"
    print(f"{state}: {out.name}: return {ret} after {out.steps:,} env steps ({fmt_duration(out.seconds)})")
    if out.interrupted and resume_command:
        print(f"  resume with:     {resume_command}")
    if out.best_checkpoint:
        print(f"  best checkpoint: {out.best_checkpoint}")
        print(f"  evaluate it:     python rollout.py {out.best_checkpoint} --episodes 1")
    if out.plot:
        print(f"  reward curve:    {out.plot}")
    if out.trial_dir:
        print(f"  results:         {out.trial_dir}")
    for err in out.errors:
        print(f"  trial failed:    {err}")
