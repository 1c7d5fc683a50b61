"""Train a single trial inside train.py's own process.

Tune runs every trial in an actor of its own: a second Python process that
imports RLlib and torch again, with Tune's bookkeeping around it.  For the
common case (one trial: no search space, no scheduler, no ``max_failures``)
that costs seconds at the start and the end of every run (measured in
benchmarks/RESULTS.md).  Here the Algorithm runs in the driver, and the trial
folder gets what Tune writes there (``params.json``, ``result.json``,
``progress.csv``, ``checkpoint_NNNNNN`` folders with their manifests), so
rollout.py, ``--resume``, the reward plot and the SLURM launcher work the
same on both paths.
"""

from __future__ import annotations

import contextlib
import csv
import datetime
import json
import math
import numbers
import os
import shutil
import threading
import traceback
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from ray.tune.utils import flatten_dict

from envsdk.cluster.ray_session import wanted_gpus
from envsdk.config.experiment import Experiment
from envsdk.config.stopping import StopCriteria
from envsdk.errors import UserError, raise_if_user_error, root_cause
from envsdk.internals import release_utilization_monitor
from envsdk.notices import notice
from envsdk.progress import ProgressLine, format_line
from envsdk.substitutions import IN_PROCESS_TRIAL
from envsdk.training.build import BuiltConfig
from envsdk.training.hooks.faults import with_learner_stats
from envsdk.training.hooks.interrupt import SignalCatcher
from envsdk.training.hooks.restarts import explain
from envsdk.training.report.outcome import Outcome
from envsdk.training.report.plots import Painter, plot_reward_curve
from envsdk.training.run.checkpoints import (
    MANIFEST,
    best_in_trial,
    complete_checkpoints,
    read_manifest,
    score,
    summary,
    write_manifest,
)
from envsdk.training.run.logger_callbacks import InProcessLoggers
from envsdk.training.run.resources import main_process_cpus


def runs_in_process(exp: Experiment, built: BuiltConfig) -> bool:
    """Whether this experiment is one trial that needs nothing only Tune gives.

    A learner that computes in the algorithm's process and wants a GPU stays
    with Tune too: Tune places that process on a node that has the GPU (the
    GPU node of a heterogeneous SLURM job), which the driver may not be.
    """
    c = built.config
    # The learner computes in the algorithm's process on the old stack, or with no remote learners.
    local_gpus = wanted_gpus(c) if not c.enable_rl_module_and_learner or not c.num_learners else 0.0
    return (
        built.stock.on(IN_PROCESS_TRIAL)  # envsdk/substitutions.py
        and exp.num_samples == 1
        and not built.search_space
        and not exp.scheduler
        and exp.max_failures == 0
        and local_gpus == 0
    )


class ResultLog:
    """``result.json``, ``progress.csv`` and TensorBoard events of a trial folder, as Tune writes them.

    The CSV gains columns when later results bring new metrics (the return
    appears once the first episode has ended): the file is then rewritten
    with the wider header.  TensorBoard scalars carry Tune's tags
    (``ray/tune/<metric>``, step = iteration), so existing dashboards work.
    An iteration's scalars go out as one event: one per scalar
    (``SummaryWriter.add_scalar``) cost a noticeable share of a short run
    for RLlib's hundred or so metrics.
    """

    def __init__(self, trial_dir: Path, keep_until: int | None = None):
        from tensorboardX import FileWriter

        self.trial_dir = trial_dir
        self.events = FileWriter(str(trial_dir), flush_secs=30)
        self.rows: list[dict[str, Any]] = []
        self.columns: list[str] = []
        csv_path = trial_dir / "progress.csv"
        if keep_until is not None and csv_path.is_file():  # resuming: drop what came after the checkpoint
            with csv_path.open() as fh:
                reader = csv.DictReader(fh)
                self.columns = list(reader.fieldnames or [])
                self.rows = [r for r in reader if int(float(r["training_iteration"])) <= keep_until]
            self._rewrite_csv()
            lines = (trial_dir / "result.json").read_text().splitlines()
            kept = [line for line in lines if json.loads(line)["training_iteration"] <= keep_until]
            (trial_dir / "result.json").write_text("".join(line + "\n" for line in kept))

    def append(self, result: dict[str, Any]) -> None:
        with (self.trial_dir / "result.json").open("a") as fh:
            fh.write(json.dumps(result, default=_json_default) + "\n")
        row = {k: v for k, v in flatten_dict(result, delimiter="/").items() if not k.startswith("config/")}
        self.events.add_summary(_scalars(row), global_step=result["training_iteration"])
        self.rows.append(row)
        new = [k for k in row if k not in self.columns]
        if new or not self.columns:
            self.columns += new
            self._rewrite_csv()
            return
        with (self.trial_dir / "progress.csv").open("a", newline="") as fh:
            csv.DictWriter(fh, self.columns, extrasaction="ignore").writerow(row)

    def close(self) -> None:
        self.events.close()

    def _rewrite_csv(self) -> None:
        tmp = self.trial_dir / ".progress.csv.tmp"
        with tmp.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, self.columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(self.rows)
        os.replace(tmp, self.trial_dir / "progress.csv")


def _scalars(row: dict[str, Any]) -> Any:
    """One TensorBoard ``Summary`` of a result's finite numbers, tagged as Tune tags them."""
    from tensorboardX.proto.summary_pb2 import Summary

    return Summary(
        value=[
            Summary.Value(tag=f"ray/tune/{key}", simple_value=float(value))
            for key, value in row.items()
            if isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
        ]
    )


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def _rank(checkpoint: Path) -> float:
    """A checkpoint's score by the run's score attribute, higher is better (as rollout.py ranks)."""
    scored = score(read_manifest(checkpoint))
    return scored[1] if scored else -math.inf


class Checkpointer:
    """Writes ``checkpoint_NNNNNN`` folders atomically and keeps the best ``keep`` of them.

    The algorithm saves into a hidden folder that is renamed into place once
    complete; the manifest, written last, marks it as whole.  Checkpoints
    are ranked by the run's score attribute (else the newest win), as
    rollout.py ranks them; the latest is always kept, so that --resume
    finds it.
    """

    def __init__(self, trial_dir: Path, run_info: dict[str, Any], keep: int | None):
        self.trial_dir = trial_dir
        self.run_info = run_info
        self.keep = keep
        found = sorted(trial_dir.glob("checkpoint_*"))
        self.next_index = int(found[-1].name.removeprefix("checkpoint_")) + 1 if found else 0

    def save(self, algo: Any, result: dict[str, Any]) -> Path:
        final = self.trial_dir / f"checkpoint_{self.next_index:06d}"
        self.next_index += 1
        tmp = self.trial_dir / f".{final.name}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        algo.save_checkpoint(str(tmp))
        os.replace(tmp, final)
        write_manifest(final, self.run_info, summary(result, self.run_info.get("score_attr")))
        self._prune(final)
        return final

    def _prune(self, latest: Path) -> None:
        if not self.keep:
            return
        complete = complete_checkpoints(self.trial_dir)  # oldest first
        if self.run_info.get("score_attr"):
            # Best first; sorted() is stable, so among equals the older stays ahead.
            ranked = sorted(complete, key=_rank, reverse=True)
        else:
            ranked = complete[::-1]  # newest first
        for folder in ranked[self.keep :]:
            if folder != latest:
                shutil.rmtree(folder)

    def best(self) -> Path | None:
        found = best_in_trial(self.trial_dir)
        return found[0] if found else None


def _new_trial_dir(exp: Experiment, built: BuiltConfig, exp_dir: Path) -> tuple[Path, str]:
    """A folder named as Tune names a trial's (``PPO_CartPole-v1_1a2b3_00000_0_<date>``)."""
    short = uuid.uuid4().hex[:5]
    stamp = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S")
    env = "".join(c if c.isalnum() or c in "-_." else "_" for c in built.env.name)[:40]
    trial_id = f"{short}_00000"
    trial_dir = exp_dir / f"{exp.run}_{env}_{trial_id}_0_{stamp}"
    trial_dir.mkdir(parents=True)
    (trial_dir / "params.json").write_text(
        json.dumps(built.config.to_dict(), indent=2, default=_json_default)
    )
    return trial_dir, trial_id


def _resumable(exp_dir: Path) -> tuple[Path, Path] | None:
    """(trial folder, latest complete checkpoint) of the last in-process run of this experiment to checkpoint.

    Trial folder names start with a random id, so the newest is the one whose checkpoint was written last.
    """
    trials = [p.parent for p in exp_dir.glob("*/progress.csv")]
    found = [(t, complete[-1]) for t in trials if (complete := complete_checkpoints(t))]
    return max(found, key=lambda tc: (tc[1] / MANIFEST).stat().st_mtime, default=None)


class _Start(NamedTuple):
    """Where a trial starts: a new folder, or the checkpoint it resumes from and its counters there."""

    trial_dir: Path
    trial_id: str
    checkpoint: Path | None = None
    iteration: int = 0
    time_total_s: float = 0.0


def _start(exp: Experiment, built: BuiltConfig, exp_dir: Path, resume: bool) -> _Start:
    """With ``resume``, the latest checkpoint of the last in-process run (none: said); else a new trial."""
    previous = _resumable(exp_dir) if resume else None
    if resume and previous is None:
        print(f"nothing to resume in {exp_dir}; starting a new run")
    if previous is None:
        return _Start(*_new_trial_dir(exp, built, exp_dir))
    trial_dir, checkpoint = previous
    manifest = read_manifest(checkpoint) or {}
    done = manifest.get("result", {})
    return _Start(
        trial_dir,
        manifest.get("run", {}).get("trial", trial_dir.name),
        checkpoint,
        int(done.get("training_iteration") or 0),
        float(done.get("time_total_s") or 0.0),
    )


def run_trial(
    exp: Experiment,
    built: BuiltConfig,
    exp_dir: Path,
    run_info: dict[str, Any],
    *,
    resume: bool = False,
    errors_dir: Path | None = None,
    since: float = 0.0,
    painter: Painter | None = None,
) -> Outcome:
    """Train to the stop criteria (or a signal), checkpointing as the experiment asks; ``painter``
    draws the reward figure (else this process does)."""
    start = _start(exp, built, exp_dir, resume)
    trial_dir, trial_id, offset_iter = start.trial_dir, start.trial_id, start.iteration
    log = ResultLog(trial_dir, keep_until=offset_iter if start.checkpoint is not None else None)
    loggers = InProcessLoggers(exp.loggers, exp_dir, exp.name, (trial_id, trial_dir), built.config.to_dict())
    run_info = {**run_info, "trial": trial_id}
    checkpointer = Checkpointer(trial_dir, run_info, exp.keep_checkpoints_num)
    progress = ProgressLine(exp.name, exp.stop)
    criteria = StopCriteria(exp.stop, exp.custom_stop)
    catcher = SignalCatcher()
    errors: list[str] = []
    result: dict[str, Any] = {}
    algo = None
    _compute_threads(built)
    catcher.install()
    try:
        algo = built.algo_class(config=built.config)
        if start.checkpoint is not None:
            algo.load_checkpoint(str(start.checkpoint))
            offset_iter -= algo.iteration  # RLlib restores its iteration count, not its clock
        loggers.start()
        while True:
            result = algo.train()
            # The counters go on from the checkpoint, as when Tune restores a trial.
            result["training_iteration"] += offset_iter
            result["time_total_s"] += start.time_total_s
            result["trial_id"] = trial_id
            log.append(result)
            loggers.result(result)
            progress.show(format_line(exp.name, result, exp.stop))
            problem = criteria.missing(result)
            if problem:
                raise UserError(problem, "fix the stop key in the YAML")
            finished = criteria.reached(result)
            if _checkpoint_due(exp, result, finished, catcher.signal_name):
                checkpointer.save(algo, result)
            if finished or catcher.signal_name:
                break
    except KeyboardInterrupt:
        if not catcher.signal_name:
            raise
        # a second signal: stop without a checkpoint
    except Exception as err:
        raise_if_user_error(err)
        errors.append(_failure(err, trial_dir, result, errors_dir, since))
    finally:
        catcher.uninstall()
        progress.finish()
        log.close()
        loggers.end(failed=bool(errors))
        # Env runners and learners elsewhere take a while to stop: the reward plot is drawn meanwhile.
        with _stopping(algo):
            plot = plot_reward_curve(trial_dir, exp.name, painter)
    return Outcome.from_result(
        name=exp.name,
        experiment_dir=exp_dir,
        trial_dir=trial_dir,
        result=result,
        errors=errors,
        best_checkpoint=checkpointer.best(),
        plot=plot,
        interrupted=catcher.signal_name,
        output=built.config.output,
        since=since,
    )


def _checkpoint_due(exp: Experiment, result: dict[str, Any], finished: bool, signal_name: str | None) -> bool:
    """A checkpoint after this iteration: on a signal (to resume from), at the end if the experiment
    asks, and every ``checkpoint_freq`` iterations."""
    return bool(
        signal_name
        or (finished and exp.checkpoint_at_end)
        or (exp.checkpoint_freq and result["training_iteration"] % exp.checkpoint_freq == 0)
    )


def _failure(
    err: Exception, trial_dir: Path, result: dict[str, Any], errors_dir: Path | None, since: float
) -> str:
    """The trial's failure reported as Tune reports one: one line now, the traceback in the trial
    folder (the line explained where the env runners' restarts or the learner's stats say more)."""
    (trial_dir / "error.txt").write_text(traceback.format_exc())
    root = root_cause(err)
    message = f"{type(root).__name__}: {root}"
    cause = with_learner_stats(explain(message, errors_dir, since), result)
    return f"{trial_dir}: {cause}" + (" (traceback in error.txt)" if cause == message else "")


def _compute_threads(built: BuiltConfig) -> None:
    """Give torch the threads a Tune trial's process would have: one per CPU RLlib asks for it.

    Ray sets ``OMP_NUM_THREADS`` in every actor to the CPUs it was given, so
    a Tune trial computes on ``num_cpus_for_main_process`` threads (or
    ``num_cpus_per_learner``, for a learner in that process); torch in a plain
    process takes every core.  For RLlib's small networks more threads gain
    nothing, and on a machine that is also running env runners, other trials
    or other jobs, spinning threads that wait for each other made SAC on
    Pendulum ten times slower (benchmarks/RESULTS.md).  An ``OMP_NUM_THREADS``
    of the user's own is kept.
    """
    if "OMP_NUM_THREADS" in os.environ:
        return
    import torch

    torch.set_num_threads(min(main_process_cpus(built.algo_class, built.config), os.cpu_count() or 1))


STOP_TIMEOUT_S = 30.0  # how long the end of a run waits for the algorithm (its env runners) to stop


@contextlib.contextmanager
def _stopping(algo: Any) -> Iterator[None]:
    """Stop ``algo`` (if any) in a thread while the block runs; the block ends once it has stopped,
    or after STOP_TIMEOUT_S: a runner stuck in its env must not keep the run from ending (what
    is left of it ends with Ray, or with the job on a joined cluster).

    An error raised by ``algo.stop()`` is raised here, after the block, as if it had been called in line.
    """
    failure: list[BaseException] = []

    def stop() -> None:
        try:
            release_utilization_monitor(algo)
            algo.stop()
        except BaseException as err:  # handed to the caller's thread below
            failure.append(err)

    stopper = (
        threading.Thread(target=stop, name="envsdk-algo-stop", daemon=True) if algo is not None else None
    )
    if stopper is not None:
        stopper.start()
    try:
        yield
    finally:
        if stopper is not None:
            stopper.join(STOP_TIMEOUT_S)
            if stopper.is_alive():
                notice(f"the algorithm did not stop within {STOP_TIMEOUT_S:.0f} s; ending without it")
    if failure:
        raise failure[0]
