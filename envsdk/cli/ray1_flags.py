"""The flags of Ray 1.x's ``rllib train`` and ``rllib rollout`` that train.py and rollout.py do not
share with Ray 2, each with what it does here: it works, it says in one notice why it has nothing
left to do, or it is refused in one ``error:``/``fix:`` line before Ray or any game starts.

``--config`` and ``--stop`` take a JSON or YAML mapping, as Ray 1.x's took JSON
(``--config '{"num_workers": 8}' --stop '{"timesteps_total": 100000}'``); ``--config`` also takes a
YAML file, read as ``-f`` reads it.  docs/commands.md lists every flag of both commands.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from envsdk.config.yamlio import merge, parse_scalar
from envsdk.errors import UserError
from envsdk.notices import notice

# Accepted and without effect in Ray 2.60: why, said once in a notice.
TRAIN_NOTICES = {
    "--eager": "torch is the only framework, and it always runs eagerly",
    "--trace": "tracing was TensorFlow eager's; torch has nothing to trace",
    "--queue-trials": "Ray 2 queues a trial that does not fit the cluster yet, always",
    "--sync-on-checkpoint": "Ray 2 writes each checkpoint to the results folder before training goes on",
    "--ray-ui": "start a cluster with `ray start --head --include-dashboard=true` and pass --ray-address",
    "--no-ray-ui": "Ray's dashboard is off unless a cluster started with it is joined",
}
# Refused: (why, the fix).
TRAIN_REFUSED = {
    "--upload-dir": (
        "Ray 2 has no upload folder beside the results folder",
        "sync --local-dir afterwards (e.g. `aws s3 sync results s3://bucket/run`)",
    ),
    "--resources-per-trial": (
        "RLlib 2.60 sizes a trial from its config, not from Tune's resources",
        "set num_env_runners, num_cpus_per_env_runner, num_gpus_per_learner in --config",
    ),
    "--export-formats": (
        "Ray 2 exports no model at the end of training",
        "export a checkpoint after training: rollout.py CHECKPOINT --export-onnx policy.onnx",
    ),
}
# Ray 1.x's scheduler names (``--scheduler MedianStopping``) as the YAML's ``scheduler: {type: ...}``.
SCHEDULER_NAMES = {"medianstopping": "median_stopping_rule", "asynchyperband": "async_hyperband"}
VERBOSITY = {1: "INFO", 2: "DEBUG"}  # -v, -vv: RLlib's log_level, as Ray 1.x's rllib train set it


def add_train_flags(p: argparse.ArgumentParser) -> None:
    """Ray 1.x ``rllib train``'s flags that train.py has no other spelling of."""
    group = p.add_argument_group("Ray 1.x rllib train's flags (docs/commands.md)")
    group.add_argument(
        "--config",
        dest="config_given",
        action="append",
        metavar="MAPPING|FILE",
        help="config keys as a JSON/YAML mapping, over every experiment's ('{\"lr\": 0.001}'); a file: as -f",
    )
    group.add_argument(
        "--stop",
        dest="stop_given",
        action="append",
        metavar="MAPPING",
        help="stop criteria as a JSON/YAML mapping, as the YAML's stop: ('{\"training_iteration\": 5}')",
    )
    group.add_argument("--experiment-name", help="the experiment's name: its folder under --local-dir")
    group.add_argument(
        "-v", dest="verbose", action="count", default=0, help="-v: RLlib's INFO log; -vv: its DEBUG log"
    )
    group.add_argument("--num-samples", type=int, help="trials per search point (num_samples)")
    group.add_argument("--max-failures", type=int, help="restarts of a failed trial (max_failures)")
    group.add_argument(
        "--scheduler", help="Tune scheduler: FIFO, AsyncHyperBand, MedianStopping, HyperBand, PBT"
    )
    group.add_argument("--scheduler-config", metavar="MAPPING", help="the scheduler's settings (a mapping)")
    group.add_argument(
        "--ray-num-nodes", type=int, help="Ray 1.x's emulated cluster: 1 only (a real one: --ray-address)"
    )
    for flag in TRAIN_NOTICES:
        group.add_argument(flag, action="store_true", help=argparse.SUPPRESS)
    for flag in TRAIN_REFUSED:
        group.add_argument(flag, help=argparse.SUPPRESS)


def check_train_flags(args: argparse.Namespace) -> None:
    """The refused flags in one line each, the flags that do nothing in one notice each."""
    for flag, (why, fix) in TRAIN_REFUSED.items():
        if getattr(args, _dest(flag)) is not None:
            raise UserError(f"{flag}: {why}", fix)
    if args.ray_num_nodes is not None and args.ray_num_nodes != 1:
        raise UserError(
            f"--ray-num-nodes {args.ray_num_nodes}: Ray 1.x emulated a cluster of nodes in one machine"
            " for debugging; Ray 2.60's train.py runs on real nodes",
            "start the nodes with `ray start` and pass --ray-address (or `envsdk slurm`), or drop the flag",
        )
    for flag, why in TRAIN_NOTICES.items():
        if getattr(args, _dest(flag)):
            notice(f"{flag} does nothing: {why}")
    for name, lowest in (("num_samples", 1), ("max_failures", -1)):
        value = getattr(args, name)
        if value is not None and value < lowest:
            flag = "--" + name.replace("_", "-")
            raise UserError(f"{flag} is {value}, but it takes an integer >= {lowest}", "")


def config_given(args: argparse.Namespace) -> tuple[list[str], dict[str, Any]]:
    """``--config`` values: (the files among them, read as ``-f``; the mappings, merged in order)."""
    files: list[str] = []
    mapping: dict[str, Any] = {}
    for text in args.config_given or ():
        if Path(text).expanduser().is_file():
            files.append(text)
            continue
        example = "--config '{\"lr\": 0.001}' or -f FILE"
        mapping = merge(mapping, _mapping(text, "--config", example, nor="a file nor "))
    return files, mapping


def _mapping(text: str, flag: str, example: str, nor: str = "") -> dict[str, Any]:
    """A JSON/YAML mapping given on the command line, or a UserError naming ``flag`` (``nor``: what
    else the flag takes)."""
    try:
        value = parse_scalar(text)
    except UserError:
        value = None
    if not isinstance(value, dict):
        what = f"neither {nor}a" if nor else "not a"
        raise UserError(f"{flag} {text!r} is {what} JSON/YAML mapping", f"write {example}")
    plain: dict[str, Any] = _plain(value)
    return plain


def _plain(value: Any) -> Any:
    """A mapping read from the command line as plain dicts (no YAML lines: errors name the flag)."""
    return {k: _plain(v) for k, v in value.items()} if isinstance(value, dict) else value


def apply_train_flags(exp: Any, args: argparse.Namespace, count: int) -> None:
    """``--stop``, ``--experiment-name``, ``--num-samples``, ``--max-failures`` and ``--scheduler`` over
    an experiment's own settings (``count``: how many experiments the command trains)."""
    from envsdk.config.validation import build_scheduler, parse_stop
    from envsdk.progress import RETURN

    for text in args.stop_given or ():
        stop = _mapping(text, "--stop", "--stop '{\"training_iteration\": 10}'")
        parsed, custom = parse_stop(stop, "--stop")
        exp.stop.update(parsed)
        exp.custom_stop |= custom
    if args.experiment_name:
        if count > 1:
            raise UserError(
                f"--experiment-name {args.experiment_name}: the command trains {count} experiments",
                "name each in its YAML file, or train one file at a time",
            )
        exp.name = args.experiment_name
    for name in ("num_samples", "max_failures"):
        if getattr(args, name) is not None:
            setattr(exp, name, getattr(args, name))
    if args.scheduler or args.scheduler_config:
        kind = (args.scheduler or "fifo").lower()
        spec = {"type": SCHEDULER_NAMES.get(kind, kind)}
        if args.scheduler_config and kind == "fifo":
            raise UserError(
                "--scheduler-config: FIFO, the scheduler without --scheduler, takes no settings",
                "name the scheduler: --scheduler AsyncHyperBand --scheduler-config '{\"grace_period\": 5}'",
            )
        if args.scheduler_config:
            spec |= _mapping(
                args.scheduler_config, "--scheduler-config", "--scheduler-config '{\"grace_period\": 5}'"
            )
        build_scheduler(spec, exp.score_metric or RETURN, exp.score_mode, "--scheduler")  # checks it
        exp.scheduler = None if spec == {"type": "fifo"} else spec


def train_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys Ray 1.x's flags set: ``-v``/``-vv`` RLlib's ``log_level`` in every process."""
    level = VERBOSITY.get(min(args.verbose, 2))
    return {"log_level": level} if level else {}


# ---- rllib rollout ---------------------------------------------------------------------------

ROLLOUT_NOTICES = {
    "--use-shelve": "rollout.py writes one .npz experience file (--out), whole when the rollout ends",
    "--track-progress": "rollout.py prints each episode as it ends, and a live line for the one in progress",
    "--local-mode": "rollout.py plays in its own process unless --num-workers asks for Ray workers",
}
# Ray 1.x rollout's --config keys that have a flag of rollout.py: key -> (that flag's dest, its type).
ROLLOUT_CONFIG_KEYS: dict[str, tuple[str, type]] = {
    "env": ("env", str),
    "env_config": ("env_config", dict),
    "explore": ("explore", bool),
    "seed": ("seed", int),
    "num_workers": ("num_workers", int),
    "num_env_runners": ("num_workers", int),
}


class _Notice(argparse.Action):
    """A flag that does nothing here: a notice saying why, when it is given."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        notice(f"{option_string} does nothing: {ROLLOUT_NOTICES[str(option_string)]}")


class _RolloutConfig(argparse.Action):
    """Ray 1.x rollout's ``--config '{JSON}'``: each key that rollout.py has a flag for sets that flag
    (``env_config`` is ``--env-config``, ``explore`` is ``--explore``); any other key is refused."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: str | None = None) -> None:
        given = _mapping(str(values), "--config", "--config '{\"explore\": false}'")
        for key, value in given.items():
            if key not in ROLLOUT_CONFIG_KEYS:
                raise UserError(
                    f"--config: rollout.py plays the checkpoint's config as trained; '{key}' cannot change",
                    f"--config takes {', '.join(ROLLOUT_CONFIG_KEYS)}; train with the setting instead",
                )
            dest, kind = ROLLOUT_CONFIG_KEYS[key]
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                raise UserError(f"--config: '{key}' is {value!r}, but it takes a {kind.__name__}", "")
            setattr(namespace, dest, json.dumps(value) if dest == "env_config" else value)


def add_rollout_flags(p: argparse.ArgumentParser) -> None:
    """Ray 1.x ``rllib rollout``'s flags that rollout.py has no other spelling of."""
    group = p.add_argument_group("Ray 1.x rllib rollout's flags (docs/commands.md)")
    group.add_argument(
        "--config",
        action=_RolloutConfig,
        metavar="MAPPING",
        help="Ray 1.x's JSON config: env, env_config, explore, seed, num_workers (as their flags)",
    )
    for flag in ROLLOUT_NOTICES:
        group.add_argument(flag, nargs=0, action=_Notice, help=argparse.SUPPRESS)


def _dest(flag: str) -> str:
    return flag.removeprefix("--").replace("-", "_")
