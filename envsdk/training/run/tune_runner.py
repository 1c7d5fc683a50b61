"""Run experiments and report what came out.

This is the experiment manager behind ``train.py``: it turns each
:class:`~envsdk.config.experiment.Experiment` plus its built config into a run.
A single trial trains in this process (:mod:`envsdk.training.run.in_process`); trials
that need Tune (samples, search spaces, schedulers, ``max_failures``, a GPU
learner placed by Tune) become a Tune run.  Either way the progress line is
live, and at the end come the best checkpoint and a reward-curve PNG.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ray import tune
from ray.rllib.callbacks.callbacks import RLlibCallback

from envsdk.config.experiment import Experiment
from envsdk.config.stopping import StopCriteria, TuneStopper
from envsdk.config.validation import build_scheduler
from envsdk.errors import UserError, one_line
from envsdk.internals import without_object_store
from envsdk.progress import RETURN, ProgressLine
from envsdk.training.build import BuiltConfig
from envsdk.training.hooks import restarts
from envsdk.training.hooks.callbacks import add_callback_class
from envsdk.training.hooks.faults import with_learner_stats
from envsdk.training.hooks.interrupt import CheckpointOnRequest, Interrupter
from envsdk.training.report.outcome import Outcome
from envsdk.training.report.plots import Painter, plot_reward_curve
from envsdk.training.run.checkpoints import ManifestWriter, best_of, check_format, read_manifest
from envsdk.training.run.in_process import run_trial, runs_in_process
from envsdk.training.run.logger_callbacks import logger_callbacks
from envsdk.training.run.resources import PendingWatch

RESTORING = "restoring weights"  # what refuses, in this layer's words; the command line names its flag

DEFAULT_STORAGE = Path("~/ray_results").expanduser()


def _run_info(exp: Experiment, built: BuiltConfig, score_attr: str | None, order: str) -> dict[str, Any]:
    """What rollout.py needs to rebuild the env: recorded in every checkpoint's manifest."""
    import ray

    return {
        "experiment": exp.name,
        "algorithm": exp.run,
        "env": built.env.name,
        # The env's own name and our wrappers around it (drop_observation_keys, atari_preprocessing)
        **(
            {"env_wrapped": {"env": built.env.wrapped_from[0], **built.env.wrapped_from[1].as_dict()}}
            if built.env.wrapped_from
            else {}
        ),
        "config_file": str(Path(exp.source).resolve()) if exp.source else None,
        "search_paths": [str(p) for p in built.search_paths],
        # The experiment as built: loading a checkpoint builds its config again from this, with the
        # code of the day (checkpoints.py: FORMAT), and takes only the weights and states from files.
        "experiment_spec": built.experiment,
        "score_attr": score_attr,
        "score_mode": order,
        "ray_version": ray.__version__,
    }


class _RestoreOnInit(RLlibCallback):
    """--restore: the algorithm starts from a checkpoint's state (:func:`restore_hook` sets the path).

    ``load_checkpoint`` (not ``restore_from_path``) so that ``on_checkpoint_loaded`` hooks run, as on
    ``--resume`` (self-play's env runners take the checkpoint's learning team there).  A class, not a
    callback function, because the old API stack (ModelV2 plugins) takes only classes.
    """

    path = ""

    def on_algorithm_init(self, *, algorithm: Any, **kwargs: Any) -> None:
        algorithm.load_checkpoint(self.path)


def restore_hook(path: str) -> type[RLlibCallback]:
    return type("RestoreOnInit", (_RestoreOnInit,), {"path": path})


def run_experiment(
    exp: Experiment,
    built: BuiltConfig,
    *,
    storage_path: str | None = None,
    resume: bool = False,
    restore: str | None = None,
    painter: Painter | None = None,
) -> Outcome:
    """Train one experiment to its stop criteria; returns where things landed.  ``painter`` draws
    the reward figure (else this process does)."""
    storage = Path(storage_path or exp.storage_path or DEFAULT_STORAGE).expanduser().resolve()
    exp_dir = storage / exp.name
    score_attr, order = exp.score_metric, exp.score_mode
    if restore:
        if not Path(restore).exists():
            raise UserError(f"no checkpoint at {restore}", "give a checkpoint folder", RESTORING)
        manifest = read_manifest(Path(restore))
        if manifest is not None:  # a format this version cannot read: said before anything starts
            check_format(Path(restore), manifest)
        add_callback_class(built.config, restore_hook(str(Path(restore).resolve())))
    run_info = _run_info(exp, built, score_attr, order)
    started = time.time()
    asked_for_restarts = bool(built.user_keys & set(restarts.USER_KEYS))
    errors_dir = restarts.prepare(built.config, exp_dir, asked_for_restarts)
    if runs_in_process(exp, built) and not (resume and tune.Tuner.can_restore(str(exp_dir))):
        with without_object_store():  # trains with no Ray started when nothing runs outside this process
            return run_trial(
                exp,
                built,
                exp_dir,
                run_info,
                resume=resume,
                errors_dir=errors_dir,
                since=started,
                painter=painter,
            )
    interrupter = Interrupter(exp_dir)
    add_callback_class(built.config, CheckpointOnRequest)
    checkpoint_config = tune.CheckpointConfig(
        num_to_keep=exp.keep_checkpoints_num,
        checkpoint_score_attribute=score_attr,
        checkpoint_score_order=order,
        checkpoint_frequency=exp.checkpoint_freq,
        checkpoint_at_end=exp.checkpoint_at_end,
    )
    stopper = TuneStopper(StopCriteria(exp.stop, exp.custom_stop))
    run_config = tune.RunConfig(
        name=exp.name,
        storage_path=str(storage),
        stop=stopper,
        checkpoint_config=checkpoint_config,
        failure_config=tune.FailureConfig(max_failures=exp.max_failures),
        callbacks=[
            ProgressLine(exp.name, exp.stop),
            ManifestWriter(run_info, list(built.space_paths())),
            interrupter,
            PendingWatch(),
            *logger_callbacks(exp.loggers, exp_dir, exp.name),
        ],
        verbose=0,
    )
    metric = score_attr or RETURN
    scheduler = build_scheduler(exp.scheduler, metric, order, str(exp.source or exp.name))
    tune_config = tune.TuneConfig(
        num_samples=exp.num_samples, scheduler=scheduler, max_concurrent_trials=built.max_concurrent
    )
    if resume and tune.Tuner.can_restore(str(exp_dir)):
        tuner = tune.Tuner.restore(
            str(exp_dir), trainable=built.algo_class, resume_unfinished=True, resume_errored=True
        )
    else:
        if resume:
            print(f"nothing to resume in {exp_dir}; starting a new run")
        tuner = tune.Tuner(
            built.algo_class,
            param_space=built.param_space(),
            tune_config=tune_config,
            run_config=run_config,
        )
    interrupter.install()
    try:
        grid = tuner.fit()
    finally:
        interrupter.uninstall()
    stopper.raise_problem()
    return summarise(
        exp, exp_dir, grid, errors_dir, started, interrupter.signal_name, painter, built.config.output
    )


def summarise(
    exp: Experiment,
    exp_dir: Path,
    grid: Any,
    errors_dir: Path,
    since: float,
    interrupted: str | None,
    painter: Painter | None = None,
    output: str | None = None,
) -> Outcome:
    """The outcome of a Tune run: its best checkpoint picked as rollout.py picks one (manifests);
    ``output``: the folder the run promised experience in."""
    explain = restarts.explain
    errors = [
        f"{r.path}: {with_learner_stats(explain(_first_line(r.error), errors_dir, since), r.metrics)}"
        for r in grid
        if r.error is not None
    ]
    trials = {Path(r.path): r for r in grid}
    best = best_of(list(trials))
    if best is not None:
        trial_dir: Path | None = best.checkpoint.parent
        checkpoint: Path | None = best.checkpoint
    else:
        trial_dir, checkpoint = (next(iter(trials), None), None)
    result = trials.get(trial_dir) if trial_dir is not None else None
    metrics = result.metrics if result is not None and result.metrics else {}
    plot = plot_reward_curve(trial_dir, exp.name, painter) if trial_dir else None
    return Outcome.from_result(
        name=exp.name,
        experiment_dir=exp_dir,
        trial_dir=trial_dir,
        result=metrics,
        errors=errors,
        best_checkpoint=checkpoint,
        plot=plot,
        interrupted=interrupted,
        output=output,
        since=since,
    )


def _first_line(error: BaseException) -> str:
    """A Tune trial's error in one line (:func:`envsdk.errors.one_line`; a trial in Tune's actor
    fails with Ray's ``RayTaskError``)."""
    return one_line(error)
