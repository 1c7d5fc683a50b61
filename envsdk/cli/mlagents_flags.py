"""The flags a user types after ``mlagents-learn``, with the meaning they have there.

Each flag sets one key of the trainer config's sections (``--num-areas`` is
``env_settings.num_areas``), over the file's value, as mlagents-learn's ``RunOptions.from_argparse``
does.  ``--env``, ``--seed``, ``--resume`` and ``--debug`` are train.py's own flags and mean the same.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from envsdk.errors import UserError


@dataclass(frozen=True)
class Flag:
    section: str
    key: str
    type: Any  # argparse's type; bool: a switch
    help: str


FLAGS: dict[str, Flag] = {
    "--run-id": Flag("checkpoint_settings", "run_id", str, "the run's name, its folder under --results-dir"),
    "--results-dir": Flag("checkpoint_settings", "results_dir", str, "where runs are written (results)"),
    "--force": Flag("checkpoint_settings", "force", bool, "replace the run's earlier results"),
    "--initialize-from": Flag("checkpoint_settings", "initialize_from", str, "start from a run's weights"),
    "--inference": Flag("checkpoint_settings", "inference", bool, "refused: use rollout.py"),
    "--load": Flag("checkpoint_settings", "load_model", bool, "dropped by mlagents-learn too (use --resume)"),
    "--train": Flag("checkpoint_settings", "train_model", bool, "dropped by mlagents-learn too"),
    "--num-envs": Flag("env_settings", "num_envs", int, "games run at once (one env runner each)"),
    "--num-areas": Flag("env_settings", "num_areas", int, "training areas in each game"),
    "--base-port": Flag("env_settings", "base_port", int, "the first game's port"),
    "--timeout-wait": Flag("env_settings", "timeout_wait", int, "seconds to wait for a game"),
    "--max-lifetime-restarts": Flag("env_settings", "max_lifetime_restarts", int, "game restarts allowed"),
    "--restarts-rate-limit-n": Flag("env_settings", "restarts_rate_limit_n", int, "restarts per period"),
    "--restarts-rate-limit-period-s": Flag("env_settings", "restarts_rate_limit_period_s", int, "the period"),
    "--width": Flag("engine_settings", "width", int, "the game window's width"),
    "--height": Flag("engine_settings", "height", int, "the game window's height"),
    "--quality-level": Flag("engine_settings", "quality_level", int, "Unity's quality level"),
    "--time-scale": Flag("engine_settings", "time_scale", float, "Unity's time scale"),
    "--target-frame-rate": Flag("engine_settings", "target_frame_rate", int, "Unity's target frame rate"),
    "--capture-frame-rate": Flag("engine_settings", "capture_frame_rate", int, "Unity's capture frame rate"),
    "--no-graphics": Flag("engine_settings", "no_graphics", bool, "run the games without graphics"),
    "--no-graphics-monitor": Flag(
        "engine_settings", "no_graphics_monitor", bool, "graphics in one game only"
    ),
    "--torch-device": Flag("torch_settings", "device", str, "cpu or cuda[:N] for the learner"),
}
DEPRECATED = {
    "--torch": "torch is the only framework",
    "--tensorflow": "mlagents-learn 1.x has no TensorFlow",
}


def add_to(parser: argparse.ArgumentParser) -> None:
    """mlagents-learn's flags, in a group of their own."""
    group = parser.add_argument_group(
        "mlagents-learn's flags", "for a trainer config with behaviors: (--env is the game's build)"
    )
    for flag, spec in FLAGS.items():
        dest = "mlagents_" + spec.key
        if spec.type is bool:
            group.add_argument(flag, dest=dest, action="store_true", default=None, help=spec.help)
        else:
            group.add_argument(flag, dest=dest, type=spec.type, help=spec.help)
    group.add_argument("--deterministic", dest="mlagents_deterministic", action="store_true", default=None)
    group.add_argument(
        "--env-args",
        dest="mlagents_env_args",
        nargs=argparse.REMAINDER,
        help="the rest: the game's arguments",
    )
    for flag in DEPRECATED:
        group.add_argument(flag, dest="mlagents_" + flag[2:], action="store_true", default=None)


def given(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The sections' keys that flags set, over the file's: ``{section: {key: value}}``."""
    out: dict[str, dict[str, Any]] = {}
    for spec in FLAGS.values():
        value = getattr(args, "mlagents_" + spec.key, None)
        if value is not None:
            out.setdefault(spec.section, {})[spec.key] = value
    if getattr(args, "mlagents_env_args", None):
        out.setdefault("env_settings", {})["env_args"] = list(args.mlagents_env_args)
    if getattr(args, "mlagents_deterministic", None):
        out.setdefault("network_settings", {})["deterministic"] = True
    if getattr(args, "env", None):
        out.setdefault("env_settings", {})["env_path"] = args.env
    if getattr(args, "seed", None) is not None:
        out.setdefault("env_settings", {})["seed"] = args.seed
    return out


def refuse_without_trainer_config(args: argparse.Namespace) -> None:
    """An mlagents-learn flag with an RLlib YAML: say where its setting goes there."""
    for flag, spec in FLAGS.items():
        if getattr(args, "mlagents_" + spec.key, None) is not None:
            raise UserError(
                f"{flag} is mlagents-learn's flag, for a trainer config with behaviors:",
                f"an RLlib config sets it (docs/mlagents-learn.md: {spec.section}.{spec.key})",
            )


def deprecated(args: argparse.Namespace) -> list[str]:
    """Notices for the flags mlagents-learn keeps only to say they do nothing."""
    return [
        f"{flag} does nothing: {why}"
        for flag, why in DEPRECATED.items()
        if getattr(args, "mlagents_" + flag[2:], None)
    ]
