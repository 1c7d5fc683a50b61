"""What a training run produced, and the summary train.py prints about it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envsdk.progress import HEALTH, STEPS, fmt_duration, health_note, lookup, mean_return, return_text
from envsdk.training.substitutes.sampling.recording import unwritten

TRAINED = "learners/__all_modules__/num_env_steps_trained_lifetime"


@dataclass(kw_only=True)
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
    health: str | None = None  # env runner failures and restarts, if any

    @classmethod
    def from_result(
        cls,
        *,
        name: str,
        experiment_dir: Path,
        trial_dir: Path | None,
        result: dict[str, Any],
        errors: list[str],
        best_checkpoint: Path | None,
        plot: Path | None,
        interrupted: str | None,
        output: str | None = None,
        since: float = 0.0,
    ) -> Outcome:
        """An outcome from a trial's last result; a run that sampled and trained nothing has failed,
        and so has one that promised experience (``output``) and wrote none after ``since``."""
        ret = mean_return(result)
        steps = int(lookup(result, STEPS) or 0)
        trained = int(lookup(result, TRAINED) or 0)
        errors = list(errors)
        if not errors and not interrupted and result and not steps and not trained:
            errors.append(f"{trial_dir}: the run sampled no env steps and trained on nothing")
        if not errors and not interrupted:
            errors += unwritten(output, since)
        return cls(
            name=name,
            experiment_dir=experiment_dir,
            trial_dir=trial_dir,
            best_return=ret,
            steps=steps,
            seconds=float(result.get("time_total_s") or 0.0),
            errors=errors,
            health=health_note(result) if result.get(HEALTH) else None,
            best_checkpoint=best_checkpoint,
            plot=plot,
            interrupted=interrupted,
        )


def print_summary(out: Outcome, resume_command: str | None = None) -> None:
    state = f"stopped by {out.interrupted}" if out.interrupted else "failed" if out.errors else "done"
    ret = return_text(out.best_return, out.steps)
    print(f"{state}: {out.name}: {ret} after {out.steps:,} env steps ({fmt_duration(out.seconds)})")
    if out.interrupted and resume_command:
        print(f"  resume with:     {resume_command}")
    if out.best_checkpoint:
        print(f"  best checkpoint: {out.best_checkpoint}")
        print(f"  evaluate it:     python rollout.py {out.best_checkpoint} --episodes 1")
    if out.plot:
        print(f"  reward curve:    {out.plot}")
    if out.health:
        print(f"  {out.health}")
    if out.trial_dir:
        print(f"  results:         {out.trial_dir}")
    for err in out.errors:
        print(f"  trial failed:    {err}")
