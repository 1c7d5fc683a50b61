"""Tune's logger callbacks for ``loggers: [wandb, mlflow]``, under Tune and in this process alike.

Under Tune they join the RunConfig's callbacks.  A trial trained in this
process (in_process.py) drives the same callback objects through
:class:`InProcessLoggers`, with an :class:`~envsdk.internals.TrialView` in
place of Tune's Trial, so both paths log the same runs with the same names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ray.tune.logger import LoggerCallback

from envsdk.config.loggers import callback_class
from envsdk.internals import TrialView
from envsdk.notices import notice

MLFLOW_FOLDER = "mlruns"


def logger_callbacks(
    loggers: dict[str, dict[str, Any]], exp_dir: Path, exp_name: str
) -> list[LoggerCallback]:
    """One callback per ``wandb``/``mlflow`` entry, with our defaults under the user's arguments.

    wandb's project defaults to the experiment's name; mlflow logs to a local file store in the
    experiment folder unless ``tracking_uri`` says otherwise.
    """
    out: list[LoggerCallback] = []
    for key, options in loggers.items():
        if key == "wandb":
            # Tune's wandb logger runs in a Ray actor, which gets WANDB_API_KEY from this process but not
            # WANDB_MODE: the mode goes in as wandb.init's argument.  Silent: wandb prints a banner and
            # a table of every metric per run, and the line below says where the run went.
            mode = options.get("mode") or os.environ.get("WANDB_MODE") or "online"
            defaults = {"project": exp_name, "mode": mode, "settings": {"silent": True}}
            notice(
                f"wandb: runs go to each trial folder's wandb/ ({mode}; `wandb sync` uploads offline runs)"
            )
            out.append(_wandb_into_trial_folders()(**{**defaults, **options}))
            continue
        uri = options.get("tracking_uri") or (exp_dir / MLFLOW_FOLDER).resolve().as_uri()
        if uri.startswith("file:"):
            # MLflow 3 keeps its file store in maintenance mode and refuses it unless told otherwise.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
            notice(f"mlflow: runs go to {uri} (`mlflow ui --backend-store-uri {uri}` shows them)")
        defaults = {"tracking_uri": uri, "experiment_name": exp_name}
        out.append(callback_class(key)(**{**defaults, **options}))
    return out


class InProcessLoggers:
    """Feeds one trial's results to Tune's logger callbacks, as Tune's controller would."""

    def __init__(
        self,
        loggers: dict[str, dict[str, Any]],
        exp_dir: Path,
        exp_name: str,
        trial: tuple[str, Path],
        config: dict[str, Any],
    ) -> None:
        trial_id, trial_dir = trial
        self.callbacks = logger_callbacks(loggers, exp_dir, exp_name)
        # stands in for Tune's Trial (typed as one in the callbacks' signatures)
        self.trial: Any = TrialView(trial_id, f"{exp_name}_{trial_id}", config, trial_dir)
        self.started = False

    def start(self) -> None:
        for callback in self.callbacks:
            callback.setup()
            callback.on_trial_start(iteration=0, trials=[self.trial], trial=self.trial)
        self.started = True

    def result(self, result: dict[str, Any]) -> None:
        iteration = int(result["training_iteration"])
        for callback in self.callbacks:
            callback.on_trial_result(
                iteration=iteration, trials=[self.trial], trial=self.trial, result=result
            )

    def end(self, failed: bool) -> None:
        """End the runs (FINISHED or FAILED) and wait for the loggers to flush."""
        if not self.started:
            return
        for callback in self.callbacks:
            if failed:
                callback.on_trial_error(iteration=0, trials=[self.trial], trial=self.trial)
            else:
                callback.on_trial_complete(iteration=0, trials=[self.trial], trial=self.trial)
            callback.on_experiment_end(trials=[self.trial])


def _wandb_into_trial_folders() -> type[LoggerCallback]:
    """Tune's wandb logger, writing each run into its trial's results folder.

    Tune's own writes into the trial's staging folder, which Tune copies to the results folder now
    and then: an offline run that ends after the last copy is missing from the results.
    """
    base = callback_class("wandb")

    class WandbIntoTrialFolders(base):  # type: ignore[valid-type, misc]
        def log_trial_start(self, trial: Any) -> None:
            if "://" not in str(trial.path):  # a local results folder (remote storage: Tune's copy)
                Path(trial.path).mkdir(parents=True, exist_ok=True)
                self.kwargs.setdefault("dir", str(trial.path))
            super().log_trial_start(trial)

    return WandbIntoTrialFolders
