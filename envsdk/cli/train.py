"""``python train.py -f config.yaml``: the ``rllib train`` command line, restored.

Flags follow the Ray 1.x ``rllib train`` / seed ``train.py`` names (the ones Ray 2 has no
counterpart of: :mod:`envsdk.cli.ray1_flags`).  ``--config MAPPING`` (JSON or YAML) and any
``--config.KEY=VALUE`` (VALUE parsed as YAML, KEY may be dotted for nested settings, winning over
the mapping) are applied on top of every experiment's ``config``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import shlex
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import envsdk
from envsdk import internals, speedups, substitutions
from envsdk.cli import mlagents_flags, ray1_flags
from envsdk.config import legacy
from envsdk.config.yamlio import LineDict, merge, parse_scalar
from envsdk.errors import UserError, exit_now, run_cli, said_under
from envsdk.notices import notice

if TYPE_CHECKING:
    from envsdk.training.report.outcome import Outcome
    from envsdk.training.report.plots import Painter

STOP_FLAGS = {
    "stop_iters": "training_iteration",
    "stop_timesteps": "num_env_steps_sampled_lifetime",
    "stop_reward": "env_runners/episode_return_mean",
    "stop_time": "time_total_s",
}


EXAMPLES = """examples:
  %(prog)s -f configs/cartpole-ppo.yaml
  %(prog)s -f configs/custom-env.yaml --num-workers 4 --checkpoint-freq 10 --local-dir results
  %(prog)s -f seed.yaml --config.lr=0.001 --config.model.fcnet_hiddens='[64, 64]'
  %(prog)s --run PPO --env CartPole-v1 --stop-iters 10
  %(prog)s --run PPO --env CartPole-v1 --config '{"num_workers": 2}' --stop '{"training_iteration": 10}'
  %(prog)s -f old-a2c.yaml --translate-algo --dry-run
  %(prog)s config/ppo/3DBall.yaml --env builds/3DBall --run-id first   (mlagents-learn's trainer config)

Override any config key with --config.KEY=VALUE (VALUE is YAML, KEY may be dotted)."""


def parser(prog: str = "train.py") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Train an RLlib agent from a YAML experiment file.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # Ray 1.x's --stop and --config are flags of their own, not --stop-iters'
    )
    p.add_argument(
        "-f",
        "--config-file",
        nargs="+",
        action="extend",
        metavar="FILE",
        help="YAML experiment file(s); several run one after another",
    )
    p.add_argument(
        "trainer_config_path", nargs="?", metavar="FILE", help="as -f FILE (as mlagents-learn takes it)"
    )
    p.add_argument("--run", help="algorithm (overrides the file's 'run')")
    p.add_argument(
        "--env", help="environment (over the file's 'env'); for an mlagents-learn config, the game's build"
    )
    p.add_argument("--local-dir", "--storage-path", dest="storage_path", help="results folder")
    p.add_argument("--temp-dir", help="Ray's session/log folder")
    p.add_argument("--checkpoint-freq", type=int, help="checkpoint every N iterations")
    p.add_argument("--checkpoint-at-end", action="store_true", default=None)
    p.add_argument("--keep-checkpoints-num", type=int, help="keep the best N checkpoints")
    p.add_argument(
        "--checkpoint-score-attr", help="metric ranking checkpoints (min- prefix: lower is better)"
    )
    p.add_argument("--stop-iters", type=int)
    p.add_argument("--stop-timesteps", type=int)
    p.add_argument("--stop-reward", type=float)
    p.add_argument("--stop-time", type=float, help="stop after this many seconds of training")
    p.add_argument(
        "--num-workers", type=_count_or_auto, help="env runners (num_env_runners); auto = all free CPUs"
    )
    p.add_argument("--num-gpus", type=float, help="GPUs for the learner")
    p.add_argument("--seed", type=int)
    p.add_argument("--framework", help="tf/tf2/tfe run as torch (RLlib 2.60 dropped TensorFlow)")
    p.add_argument(
        "--translate-algo",
        action="store_true",
        help="run a removed algorithm (A2C, PG, DDPG, TD3, ApexDQN, ...) with its nearest 2.60 one",
    )
    p.add_argument(
        "--ray-address", "--ip-head", dest="ray_address", help="join this Ray cluster ('auto': $RAY_ADDRESS)"
    )
    p.add_argument("--redis-password", help="ignored: Ray 2 has no Redis password")
    p.add_argument("--ray-num-cpus", type=int)
    p.add_argument("--ray-num-gpus", type=int)
    p.add_argument("--ray-object-store-memory", type=int)
    p.add_argument("--local-mode", action="store_true", help="debugging: no remote env runners")
    p.add_argument("--resume", action="store_true", help="continue the experiment in --local-dir")
    p.add_argument("--restore", help="start from this checkpoint's weights and state")
    p.add_argument("--dry-run", action="store_true", help="print the resolved config and exit")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"%(prog)s (envsdk {envsdk.__version__})")
    ray1_flags.add_train_flags(p)
    mlagents_flags.add_to(p)
    return p


def parse_overrides(extra: list[str]) -> dict[str, Any]:
    """``--config.a.b=1`` -> {"a": {"b": 1}}; anything else is an error."""
    overrides: dict[str, Any] = {}
    for item in extra:
        if not item.startswith("--config.") or "=" not in item:
            raise UserError(f"unknown argument '{item}'", "see `python train.py --help`")
        key, _, text = item.removeprefix("--config.").partition("=")
        node = overrides
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = parse_scalar(text)
    return overrides


def load(args: argparse.Namespace, overrides: dict[str, Any]) -> list:
    """The experiments to train, each with the command line's flags and ``--config`` overrides on it."""
    experiments = _experiments(args, overrides)
    flag_config = _flag_config(args)
    for exp in experiments:
        _run_as(exp, args)
        if exp.mlagents_keys is None:  # an mlagents-learn config's --env is its game, read in translation
            exp.env = args.env or overrides.get("env") or exp.env  # the command line wins over the YAML
        ray1_flags.apply_train_flags(exp, args, len(experiments))
        _stop_flags(exp, args)
        _checkpoint_flags(exp, args)
        if exp.mlagents_keys is not None:
            _earlier_run(exp, args)
        exp.overrides = merge(overrides, flag_config)
    return experiments


def _experiments(args: argparse.Namespace, overrides: dict[str, Any]) -> list:
    """The experiments of the ``-f`` files, or the one that ``--run`` and ``--env`` (or the
    ``--config`` mapping's ``env``) make."""
    from envsdk.config.experiment import Experiment, load_experiments

    files = [*(args.config_file or []), *([args.trainer_config_path] if args.trainer_config_path else [])]
    if files:
        given = mlagents_flags.given(args)
        experiments = [exp for path in files for exp in load_experiments(path, given)]
        if not any(exp.mlagents_keys is not None for exp in experiments):
            mlagents_flags.refuse_without_trainer_config(args)
        _unique_names(experiments)
        return experiments
    env = args.env or overrides.get("env")
    if args.run and env:
        return [Experiment(name=f"{args.run}_{env}", run=args.run, env=env, config=LineDict())]
    raise UserError("nothing to train", "pass -f config.yaml (or both --run and --env)")


def _flag_config(args: argparse.Namespace) -> dict[str, Any]:
    """The config keys that flags set (``--num-workers``: ``num_env_runners``, ...), for every experiment."""
    flag_config: dict[str, Any] = ray1_flags.train_config(args)
    if args.num_workers is not None:
        flag_config["num_env_runners"] = args.num_workers
    if args.num_gpus is not None:
        flag_config["num_gpus_per_learner"] = args.num_gpus
    if args.seed is not None:
        flag_config["seed"] = args.seed
    if args.local_mode:
        flag_config.update(num_env_runners=0, evaluation_num_env_runners=0)
        notice(
            "--local-mode: sampling in the training process "
            "(Ray 2 has no local_mode; use RAY_DEBUG=1 for breakpoints)"
        )
    return flag_config


def _earlier_run(exp: Any, args: argparse.Namespace) -> None:
    """mlagents-learn's rule for a run id used before: --resume continues it, --force replaces it."""
    import shutil

    folder = Path(exp.storage_path or "results").expanduser().resolve() / exp.name
    if not folder.exists() or args.resume or args.dry_run:
        return
    if not getattr(args, "mlagents_force", None):
        raise UserError(
            f"run id '{exp.name}' has results already in {folder}",
            "pass --resume to continue it, --force to replace them, or another --run-id",
        )
    notice(f"--force: replacing the earlier results of run id '{exp.name}' in {folder}")
    shutil.rmtree(folder)


def _run_as(exp: Any, args: argparse.Namespace) -> None:
    """``--run`` over the file's ``run``; ``--translate-algo``: a removed algorithm as its nearest one."""
    exp.run = args.run or exp.run
    removed = legacy.removed_algorithm(exp.run)
    if args.translate_algo and removed is not None and removed.safe and removed.algorithm:
        notice(f"--translate-algo: 'run: {exp.run}' runs as {removed.algorithm} ({removed.why})")
        exp.translated_from, exp.run = exp.run, removed.algorithm


def _stop_flags(exp: Any, args: argparse.Namespace) -> None:
    """``--stop-iters`` and the like over the file's ``stop``, each checked as its key would be."""
    from envsdk.config.validation import check_stop_value

    for flag, metric in STOP_FLAGS.items():
        if getattr(args, flag) is not None:
            check_stop_value(metric, getattr(args, flag), f"--{flag.replace('_', '-')}")
            exp.stop[metric] = getattr(args, flag)


def _checkpoint_flags(exp: Any, args: argparse.Namespace) -> None:
    """``--checkpoint-freq``, ``--keep-checkpoints-num``, ``--checkpoint-at-end`` and
    ``--checkpoint-score-attr`` over the file's settings."""
    for name in ("checkpoint_freq", "keep_checkpoints_num", "checkpoint_at_end"):
        if getattr(args, name) is not None:
            setattr(exp, name, getattr(args, name))
    if args.checkpoint_score_attr:
        from envsdk.config.validation import parse_score_attr

        exp.score_metric, exp.score_mode = parse_score_attr(
            args.checkpoint_score_attr, "--checkpoint-score-attr"
        )


def _unique_names(experiments: list) -> None:
    """Experiments of several files that share a name get their file's name too (their own folder)."""
    seen: dict[str, Any] = {}
    for exp in experiments:
        if exp.name in seen and seen[exp.name].source != exp.source:
            new = f"{exp.name}-{Path(exp.source).stem}"
            first = seen[exp.name].source
            notice(f"experiment '{exp.name}' of {exp.source} runs as '{new}' ({first} has one too)")
            exp.name = new
        seen[exp.name] = exp


def _plain(value: Any) -> Any:
    """YAML-printable form of a config value (callables and classes by name)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, functools.partial):
        settings = ", ".join(f"{k}={v}" for k, v in value.keywords.items())
        return f"{_plain(value.func)}({settings})"
    name = getattr(value, "__qualname__", None)
    return f"{value.__module__}.{name}" if name else repr(value)


def dry_run(exp: Any, built: Any) -> None:
    import yaml

    defaults = built.algo_class.get_default_config().to_dict()
    resolved = built.config.to_dict()
    changed = {
        k: _plain(v)
        for k, v in resolved.items()
        if not k.startswith("_")
        and k not in ("env", "callbacks_on_train_result", "callbacks_on_algorithm_init")
        and repr(v) != repr(defaults.get(k))
    }
    doc = {
        exp.name: {
            "run": exp.run,
            "env": f"{built.env.name} ({built.env.kind})",
            "stop": exp.stop,
            "checkpoint_freq": exp.checkpoint_freq,
            "checkpoint_at_end": exp.checkpoint_at_end,
            "search_space": {"/".join(k): str(v) for k, v in built.search_space.items()},
            "models": built.models,
            "sampler": built.sampler,
            "substitutions in force": [n for n in substitutions.TABLE if built.stock.on(n)],
            "config (differs from RLlib defaults)": changed,
        }
    }
    print(yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100).rstrip())
    if exp.mlagents_keys is not None:
        print(f"mlagents-learn's keys in {exp.source}, key by key:")
        print("\n".join(f"  {key:<40} -> {became}" for key, became in exp.mlagents_keys))
    print("\n".join(substitutions.report(built.stock)))


def main(argv: list[str], prog: str = "train.py") -> int:
    """Read the experiments, build their configs (print them, with --dry-run), then train each in turn."""
    args, overrides = _parse(argv, prog)
    experiments = load(args, overrides)
    built = _build(experiments, args.dry_run)
    if args.dry_run:
        for exp, b in zip(experiments, built, strict=True):
            dry_run(exp, b)
        return 0
    pairs = list(zip(experiments, built, strict=True))
    with_ray = _start(args, pairs)
    return _train(pairs, args, argv, with_ray)


def _parse(argv: list[str], prog: str) -> tuple[argparse.Namespace, dict[str, Any]]:
    """The flags and the config overrides (``--config MAPPING``, then ``--config.KEY=VALUE`` over it);
    a notice for each flag Ray 2 has no use for, one line for each it refuses."""
    # --config.KEY=VALUE apart first: argparse would hand one whose VALUE has a space ('[a, b]') to -f
    own = [a for a in argv if not a.startswith("--config.")]
    args, extra = parser(prog).parse_known_args(own)
    ray1_flags.check_train_flags(args)
    files, mapping = ray1_flags.config_given(args)
    args.config_file = [*(args.config_file or []), *files] or None
    overrides = merge(mapping, parse_overrides(extra + [a for a in argv if a.startswith("--config.")]))
    if args.framework and args.framework != "torch":
        notice(f"--framework {args.framework} runs as torch: RLlib 2.60 has only torch")
    if args.redis_password:
        notice("--redis-password is ignored: Ray 2 clusters need no Redis password")
    for line in mlagents_flags.deprecated(args):
        notice(line)
    return args, overrides


def _build(experiments: list, dry_run: bool) -> list:
    """Each experiment's BuiltConfig, with RLlib imported and the speed-ups installed first."""
    # The patches act on the whole process: off for every experiment if one turns it off.
    stock = substitutions.Stock.resolve(*(_stock_setting(e) for e in experiments))
    with speedups.untracked_imports(stock):  # RLlib's import (torch, Ray, Tune), out of the collector's way
        from envsdk.training.build import build_config
    speedups.install_for_command(stock)
    return [build_config(exp, exp.overrides, dry_run=dry_run) for exp in experiments]


def _start(args: argparse.Namespace, pairs: list[tuple[Any, Any]]) -> bool:
    """Check the GPUs asked for, and start or join Ray if any experiment needs it; whether it did."""
    from envsdk.cluster.ray_session import SUBJECT as JOINING
    from envsdk.cluster.ray_session import check_gpus, kill_descendants, local_gpus, start_ray
    from envsdk.envs.faults.stall_watch import on_hard_exit

    if not args.ray_address:  # a local Ray: its GPUs are known before it starts
        have = float(args.ray_num_gpus) if args.ray_num_gpus is not None else local_gpus()
        for _, b in pairs:
            check_gpus(b.config, have=have)

    if args.ray_address:
        for flag, value in (("--ray-num-cpus", args.ray_num_cpus), ("--ray-num-gpus", args.ray_num_gpus)):
            if value is not None:
                notice(
                    f"{flag} {value:g} is ignored: it sizes a local Ray, and --ray-address joins a cluster"
                )
    on_hard_exit(kill_descendants)  # a stall that cannot be interrupted ends the run and what it started
    with_ray = any(_needs_ray(exp, b) for exp, b in pairs)  # --ray-address too: joined only when needed
    if with_ray:
        preload = threading.Thread(target=_preload, daemon=True)
        preload.start()
        with said_under({JOINING: "--ray-address"} if args.ray_address else {}):
            start_ray(
                args.ray_address,
                num_cpus=args.ray_num_cpus,
                num_gpus=args.ray_num_gpus,
                object_store_memory=args.ray_object_store_memory,
                temp_dir=args.temp_dir,
                code_paths=sorted({p for _, b in pairs for p in b.search_paths} | {Path.cwd()}),
            )
        preload.join()
    return with_ray


def _train(pairs: list[tuple[Any, Any]], args: argparse.Namespace, argv: list[str], with_ray: bool) -> int:
    """Train the experiments one after another, each summed up; 1 if any failed. A signal ends them all."""
    from envsdk.cluster.ray_session import stop_ray
    from envsdk.training.report.outcome import print_summary
    from envsdk.training.report.plots import Painter

    failed = False
    try:
        # One process draws every trial's reward figure (matplotlib imported once, while training).
        with Painter() as painter:
            for exp, b in pairs:
                outcome = _run_one(exp, b, args, with_ray, painter)
                print_summary(outcome, resume_command(argv))
                failed |= bool(outcome.errors)
                if exp.mlagents_keys is not None and not outcome.errors and not outcome.interrupted:
                    failed |= not _brains_as_mlagents_learn_writes_them(outcome)
                if outcome.interrupted:
                    break  # a signal stops the whole command, not just this experiment
    finally:
        stop_ray()  # now rather than in Ray's exit hook, and faster
    return 1 if failed else 0


def _brains_as_mlagents_learn_writes_them(outcome: Outcome) -> bool:
    """An mlagents-learn config's run ends as mlagents-learn's does: the last checkpoint's brains, one
    ``<Behavior>.onnx`` per policy, in the run's folder (``results/<run-id>/``); False if they could
    not be written."""
    from envsdk.evaluation.restore import load
    from envsdk.evaluation.unity_brain import export_brains

    last = sorted(outcome.trial_dir.glob("checkpoint_*")) if outcome.trial_dir else []
    if not last:
        print(f"failed: {outcome.name}: no checkpoint to export the brains of", file=sys.stderr)
        return False
    try:
        brains = export_brains(load(last[-1]), outcome.experiment_dir)
    except UserError as err:
        print(f"failed: {outcome.name}: its brains were not exported: {err}", file=sys.stderr)
        return False
    for behavior, path in sorted(brains.items()):
        print(f"  unity brain:     {behavior} -> {path} (as mlagents-learn writes it; {last[-1].name})")
    return True


def _stock_setting(exp: Any) -> tuple[Any, str]:
    """An experiment's ``stock:`` and where it is set: ``--config.stock`` over the YAML's."""
    key = substitutions.KEY
    if key in exp.overrides:
        return exp.overrides[key], f"--config.{key}"
    return exp.config.get(key), exp.config.where(key)


def _run_one(exp: Any, built: Any, args: argparse.Namespace, with_ray: bool, painter: Painter) -> Outcome:
    """Size one experiment's trials to the cluster, say what trains, and run it to its Outcome."""
    from envsdk.cluster.ray_session import check_gpus
    from envsdk.training.run.in_process import runs_in_process
    from envsdk.training.run.resources import fit, trial_count
    from envsdk.training.run.tune_runner import RESTORING, run_experiment

    if with_ray:  # without Ray, the learner is in this process and wants no GPU
        check_gpus(built.config, faked=bool(args.ray_num_gpus) and not args.ray_address)
    # The whole cluster, not what is free now: on a shared cluster a trial that fits waits its turn.
    cpus = cluster_cpus(args.ray_num_cpus)
    sized = built.size_env_runners(cpus)
    if sized is not None:
        print(f"num_env_runners: auto -> {sized} (the cluster's CPUs less the algorithm's and learners')")
    trials = trial_count(exp.num_samples, built.search_space)
    built.max_concurrent = fit(
        exp.name, built.algo_class, built.config, runs_in_process(exp, built), trials, cpus
    )
    for line in built.models:
        print(f"[{exp.name}] model {line}")
    with said_under({RESTORING: "--restore"}):
        return run_experiment(
            exp,
            built,
            storage_path=args.storage_path,
            resume=args.resume,
            restore=args.restore,
            painter=painter,
        )


def _needs_ray(exp: Any, built: Any) -> bool:
    """Whether the run needs Ray at all.

    It does for a Tune trial; env runners or learners outside this process;
    offline data (read with Ray Data); wandb (its logger is a Ray actor); and
    an algorithm not known to train without Ray (IMPALA and APPO start actors).
    A single trial that samples and learns in this process needs none: it
    trains with no Ray started, which saves a short run Ray's start-up and
    shut-down (benchmarks/phases.py measures it).
    """
    from envsdk.internals import trains_without_ray
    from envsdk.training.run.in_process import runs_in_process

    c = built.config
    remote = built.auto_runners or c.num_env_runners or c.evaluation_num_env_runners or c.num_learners
    offline = c.input_ != "sampler"
    return (
        bool(remote)
        or offline
        or "wandb" in exp.loggers
        or not trains_without_ray(built.algo_class)
        or not runs_in_process(exp, built)
    )


def cluster_cpus(asked: int | None) -> float:
    """The CPUs of the Ray cluster joined or started, or of this machine (``--ray-num-cpus``) without Ray."""
    import ray

    if ray.is_initialized():
        return float(ray.cluster_resources().get("CPU", 0.0))
    return float(asked or os.cpu_count() or 1)


def _preload() -> None:
    for name in internals.PRELOAD:
        importlib.import_module(name)


def _count_or_auto(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def resume_command(argv: list[str]) -> str:
    """This command line with --resume (what to run after an interruption)."""
    args = [a for a in argv if a != "--resume"]
    return shlex.join(["python", "train.py", *args, "--resume"])


def entry() -> None:
    exit_now(run_cli(main))
