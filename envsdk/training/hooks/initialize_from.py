"""``initialize_from``: policies that start from another run's weights, and nothing else of it.

mlagents-learn's ``--initialize-from RUN_ID`` and a behavior's ``init_path`` start training from a
saved model with the step counts, the optimizer and the schedules new.  Here::

    config:
      initialize_from: results/first          # every policy of this run that the checkpoint holds
      initialize_from: {Striker: results/first, Goalie: results/old/checkpoint_000004}

A path is a checkpoint folder, or a folder holding checkpoints (a run's or a trial's): its newest
checkpoint is read, as mlagents-learn reads a run's last model.  :func:`sources` checks it all
before anything starts; :func:`load_weights` (``on_algorithm_init``) loads each policy's module
state with RLlib's own ``Algorithm.restore_from_path(..., component=...)``, the documented way to
load one module of a checkpoint, and sends the weights to the env runners.  ``--resume`` and
``--restore`` restore their checkpoint after this, so they win.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_LEARNER_GROUP, COMPONENT_RL_MODULE

from envsdk.config.yamlio import LineDict
from envsdk.errors import UserError, did_you_mean
from envsdk.internals.checkpoint_layout import CHECKPOINT_MARKER, MODULE_DIR
from envsdk.notices import notice

KEY = "initialize_from"
EVERY_POLICY = "*"  # the string form: every policy of the run that the checkpoint holds


def take(values: LineDict, base: Path) -> dict[str, Path]:
    """``initialize_from`` out of the config: policy (or :data:`EVERY_POLICY`) -> checkpoint folder."""
    if KEY not in values:
        return {}
    where, given = values.where(KEY), values.pop(KEY)
    if isinstance(given, str | Path):
        given = {EVERY_POLICY: given}
    if not isinstance(given, Mapping) or not given:
        raise UserError(
            f"{where}: {KEY} takes a checkpoint path, or policies mapped to checkpoint paths; got {given!r}",
            f"e.g. '{KEY}: results/first' or '{KEY}: {{policy: results/first}}'",
        )
    return {str(policy): newest_checkpoint(base, path, where) for policy, path in given.items()}


def newest_checkpoint(base: Path, path: Any, where: str) -> Path:
    """``path`` (relative to ``base``), or the newest checkpoint under it."""
    folder = (base / Path(str(path)).expanduser()).resolve()
    if not folder.is_dir():
        raise UserError(f"{where}: {KEY}: no such folder: {folder}", "pass a checkpoint or a run's folder")
    if (folder / CHECKPOINT_MARKER).is_file():
        return folder
    found = [
        marker.parent
        for marker in folder.rglob(CHECKPOINT_MARKER)
        if marker.parent.name.startswith("checkpoint_")
    ]
    if not found:
        raise UserError(
            f"{where}: {KEY}: no checkpoint in {folder}", "pass the folder of a run that saved one"
        )
    return max(found, key=lambda p: (p.stat().st_mtime, p.name))


def sources(given: dict[str, Path], policies: Iterable[str], where: str) -> dict[str, Path]:
    """Each of the run's ``policies`` that starts from a checkpoint -> the checkpoint; every name
    checked against the run's policies and the checkpoint's modules."""
    policies = sorted(map(str, policies))
    out: dict[str, Path] = {}
    for policy, checkpoint in given.items():
        modules = checkpoint / MODULE_DIR
        held = sorted(p.name for p in modules.iterdir() if p.is_dir()) if modules.is_dir() else []
        has = ", ".join(held) or "none"
        if policy == EVERY_POLICY:
            both = [p for p in policies if p in held]
            if not both:
                raise UserError(
                    f"{where}: {KEY}: {checkpoint} holds no policy of this run (it has {has})",
                    f"map the run's policies ({', '.join(policies)}) to checkpoints of theirs",
                )
            out.update(dict.fromkeys(both, checkpoint))
            continue
        if policy not in policies:
            raise UserError(
                f"{where}: {KEY} names policy '{policy}', which this run does not have",
                did_you_mean(policy, policies) or f"its policies: {', '.join(policies)}",
            )
        if policy not in held:
            raise UserError(
                f"{where}: {KEY}: {checkpoint} holds no policy '{policy}' (it has {has})",
                "pass a checkpoint of a run that trained that policy",
            )
        out[policy] = checkpoint
    return out


def load_weights(*, algorithm: Any, sources: dict[str, Path], **_: Any) -> None:
    """``on_algorithm_init``: each policy's module state from its checkpoint, then to the env runners."""
    for policy, checkpoint in sorted(sources.items()):
        component = "/".join((COMPONENT_LEARNER_GROUP, COMPONENT_LEARNER, COMPONENT_RL_MODULE, policy))
        algorithm.restore_from_path(checkpoint / MODULE_DIR / policy, component=component)
        notice(f"{KEY}: policy '{policy}' starts from the weights of {checkpoint}")
    algorithm.env_runner_group.sync_weights(
        from_worker_or_learner_group=algorithm.learner_group, policies=sorted(sources), inference_only=True
    )
