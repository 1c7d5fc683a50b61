"""SIGTERM / Ctrl-C during training: checkpoint, stop cleanly, say how to resume.

SLURM sends SIGTERM when a job reaches its time limit (or ``--signal`` before
it).  On the first SIGTERM or SIGINT the run finishes its current iteration,
writes a checkpoint and ends so that ``train.py --resume`` continues it; a
second signal skips the checkpoint and stops at once.

A trial trained in train.py's own process (:mod:`envsdk.training.run.in_process`) checks
:attr:`SignalCatcher.signal_name` after each iteration.  Under Tune the
trials live in actors: the driver writes a request file into the experiment
folder, every trial's algorithm sees it after its current iteration and asks
Tune for a checkpoint (``should_checkpoint``); once every running trial has
one, the driver ends the run with Tune's own graceful interruption
(SIGUSR1), which keeps the trials unfinished for ``Tuner.restore``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

from ray import tune
from ray.rllib.callbacks.callbacks import RLlibCallback

from envsdk.internals import stop_tune_gracefully, trial_experiment_dir

REQUEST_FILE = ".envsdk-interrupt"


def request_path(exp_dir: Path) -> Path:
    return Path(exp_dir) / REQUEST_FILE


class CheckpointOnRequest(RLlibCallback):
    """Asks Tune for a checkpoint after an iteration once the driver has made a request.

    Runs in the trial's actor; the request file sits in the experiment folder
    (Tune's storage), which the actor finds through the trainable's storage.
    """

    def on_train_result(self, *, algorithm: Any, result: dict, **kwargs: Any) -> None:
        folder = trial_experiment_dir(algorithm)
        if folder is not None and request_path(folder).exists():
            result["should_checkpoint"] = True


class SignalCatcher:
    """Catches SIGTERM and SIGINT for the length of one run."""

    def __init__(self) -> None:
        self.signal_name: str | None = None  # the first signal received, if any
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    def install(self) -> None:
        self._pid = os.getpid()
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:
            # A process forked after install, with this handler: an env of an async vector env
            # (envsdk/training/substitutes/sampling/parallel_envs.py), which Ctrl-C reaches with
            # its whole process group. The run's own process finishes the iteration and closes it.
            return
        name = signal.Signals(signum).name
        if self.signal_name is not None:
            print(f"\n{name} again: stopping now, without a new checkpoint", file=sys.stderr, flush=True)
            self.stop_now()
            return
        self.signal_name = name
        print(
            f"\n{name} received: finishing the current iteration and writing a checkpoint"
            " (send it again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
        self.request_checkpoint()

    def request_checkpoint(self) -> None:
        """First signal: the run sees ``signal_name`` after its iteration; nothing more to do here."""

    def stop_now(self) -> None:
        """Second signal: abandon the iteration in progress."""
        raise KeyboardInterrupt


class Interrupter(SignalCatcher, tune.Callback):
    """The Tune run's catcher: passes the request on to the trials, ends the run once they checkpointed."""

    def __init__(self, exp_dir: Path):
        super().__init__()
        self.request = request_path(exp_dir)
        self._pending: set[str] | None = None

    def __getstate__(self) -> dict:  # Tune pickles callbacks with the experiment state
        return {"request": self.request, "signal_name": None, "_pending": None, "_previous": {}}

    def install(self) -> None:
        os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"  # Ctrl-C comes to us first
        self.request.unlink(missing_ok=True)
        super().install()

    def uninstall(self) -> None:
        super().uninstall()
        self.request.unlink(missing_ok=True)

    def request_checkpoint(self) -> None:
        self.request.parent.mkdir(parents=True, exist_ok=True)
        self.request.write_text(self.signal_name or "")

    def stop_now(self) -> None:
        stop_tune_gracefully()  # trials stay resumable

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self.signal_name is not None and self._pending is None:
            self._pending = {t.trial_id for t in trials if t.status == "RUNNING"}
            if not self._pending:
                self.stop_now()

    def _done(self, trial: Any) -> None:
        if self._pending is None or trial.trial_id not in self._pending:
            return
        self._pending.discard(trial.trial_id)
        if not self._pending:
            self.stop_now()

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._done(trial)
