"""Private Tune: trial folders, its utilization monitor, a graceful stop, what loggers read."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

# ---- Tune ---------------------------------------------------------------------------------------


def trial_experiment_dir(algorithm: Any) -> Path | None:
    """The experiment folder of the Tune trial an Algorithm runs in (None outside Tune).

    Tune gives a trainable its storage privately; the SIGTERM checkpoint request is a file there.
    """
    storage = getattr(algorithm, "_storage", None)
    return Path(storage.experiment_fs_path) if storage is not None else None


def release_utilization_monitor(trainable: Any) -> None:
    """Let ``trainable.stop()`` return without joining Tune's utilization monitor thread.

    ``Trainable.__init__`` starts a ``UtilMonitor`` (``log_sys_usage``, on in RLlib's configs): a
    daemon thread that reads CPU and memory every 0.7 s for the ``perf/`` metrics and sleeps in
    between.  ``Trainable.stop`` joins it, which waits out the sleep (most of ``algo.stop()``
    for a trial in this process).  Once no result is wanted, the thread is told to
    stop and the trainable gets a monitor that never started; the daemon thread ends when its sleep
    does, and the process may exit before that.

    Upstream: Ray Tune 2.60.0, no upstream issue found (searched 2026-11-28).
    """
    from ray.tune.utils.util import UtilMonitor

    monitor = getattr(trainable, "_monitor", None)
    if isinstance(monitor, UtilMonitor):
        monitor.stop()
        trainable._monitor = UtilMonitor(start=False)


def uncount_iteration(trainable: Any, result: dict[str, Any]) -> None:
    """Take the iteration that just ended out of the count: its result and the next one's number.

    ``Trainable.train`` adds one to its private ``_iteration`` (and ``_iterations_since_restore``)
    after each ``step()``, puts that in the result as ``training_iteration``, then calls
    ``log_result`` (RLlib's ``on_train_result``) with the same dict.  Upstream: Ray Tune 2.60.0.
    """
    trainable._iteration -= 1
    trainable._iterations_since_restore -= 1
    result["training_iteration"] = trainable._iteration


def stop_tune_gracefully() -> None:
    """Tune's own graceful stop: ``tune.run``/``Tuner.fit`` treat SIGUSR1 like Ctrl-C, ending the
    trials as unfinished so that ``Tuner.restore`` resumes them."""
    os.kill(os.getpid(), signal.SIGUSR1)


# Tune's logger callbacks (WandbLoggerCallback, MLflowLoggerCallback) take a Tune ``Trial``, of which
# they read only these attributes (and str(trial) as the run's name).  A trial trained in this
# process has no Tune Trial, so it hands them this view of itself.
TRIAL_ATTRIBUTES_READ_BY_LOGGERS = (
    "trial_id",
    "config",
    "experiment_dir_name",
    "local_path",
    "path",
    "checkpoint",
)


class TrialView:
    """What Tune's logger callbacks read of a Trial, for a trial that runs without Tune.

    Hashed by identity, as Trials are: the callbacks key their per-trial state by it.
    """

    def __init__(self, trial_id: str, name: str, config: dict[str, Any], trial_dir: Path) -> None:
        self.trial_id = trial_id
        self.config = config
        self.experiment_dir_name = trial_dir.parent.name
        self.local_path = str(trial_dir)
        self.path = str(trial_dir)  # where Tune copies a trial's files (the same folder here)
        self.checkpoint = None  # wandb uploads checkpoints only when asked; no Tune checkpoint here
        self._name = name

    def __str__(self) -> str:
        return self._name
