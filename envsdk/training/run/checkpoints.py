"""Checkpoint manifests, integrity checks and finding the checkpoint a path means.

Tune copies each checkpoint into the trial folder file by file, so a run
killed mid-copy leaves a folder that looks complete but is not.  After a
checkpoint has landed, :class:`ManifestWriter` writes ``envsdk_checkpoint.json``
into it (to a temporary name, then an atomic rename): the size and SHA-256
of every file, the result at that iteration and how the run was set up (the
algorithm, the env reference and the folders its module was found in).  The
manifest is the commit marker: :func:`verify` refuses a folder whose files
do not match it, and :func:`locate` never picks a checkpoint without one when
a complete one exists.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray import tune

import envsdk
from envsdk import substitutions
from envsdk.errors import UserError
from envsdk.internals import CHECKPOINT_MARKER
from envsdk.notices import notice
from envsdk.progress import RETURN, STEPS, lookup

MANIFEST = "envsdk_checkpoint.json"
# The checkpoint format this version writes and reads; CHANGELOG.md says what each one changed.
# A newer format is refused with the version that wrote it.  Format 1 (envsdk 0.1, 0.2) has no
# experiment_spec: its config is unpickled (evaluation/restore.py); format 2 builds it again.
FORMAT = 2


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(folder: Path, run: dict[str, Any], result: dict[str, Any]) -> Path:
    """Record every file of ``folder`` plus ``run`` and ``result``; atomic."""
    files = {
        str(p.relative_to(folder)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name != MANIFEST and not p.name.startswith(f".{MANIFEST}")
    }
    doc = {
        "format": FORMAT,
        "envsdk_version": envsdk.__version__,
        "run": run,
        "result": result,
        "files": files,
    }
    tmp = folder / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    os.replace(tmp, folder / MANIFEST)
    return folder / MANIFEST


def read_manifest(folder: Path) -> dict[str, Any] | None:
    path = folder / MANIFEST
    if not path.is_file():
        return None
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
        return manifest
    except (OSError, ValueError) as err:
        raise UserError(
            f"damaged checkpoint {folder}: {MANIFEST} is unreadable ({err})",
            "pick another checkpoint of the trial",
        ) from err


def recorded_stock(folder: Path) -> tuple[Any, str]:
    """The ``stock:`` of the run that wrote the checkpoint ``folder`` (its manifest's experiment
    record; None where there is none) and where it is set, for ``substitutions.Stock.resolve``."""
    run = (read_manifest(folder) or {}).get("run") or {}  # none: verify() refuses the checkpoint later
    config = (run.get("experiment_spec") or {}).get("config") or {}
    return config.get(substitutions.KEY), f"{folder / MANIFEST}: the run's config"


def check_format(folder: Path, manifest: dict[str, Any]) -> None:
    """A checkpoint of a format this version cannot read is refused, naming the version that
    wrote it (format 1 is the first; every manifest so far has it)."""
    written = manifest.get("format")
    by = manifest.get("envsdk_version", "an unknown version")
    if not isinstance(written, int) or isinstance(written, bool) or written < 1:
        raise UserError(
            f"damaged checkpoint {folder}: {MANIFEST} names no checkpoint format ({written!r})",
            "pick another checkpoint of the trial",
        )
    if written > FORMAT:
        raise UserError(
            f"{folder} was written by envsdk {by} in checkpoint format {written}; this envsdk"
            f" ({envsdk.__version__}) reads formats up to {FORMAT}",
            f"install envsdk {by} or newer to roll it out, resume or export it (CHANGELOG.md: the formats)",
        )


def verify(folder: Path) -> dict[str, Any] | None:
    """Check ``folder`` against its manifest; returns the manifest (None if it has none)."""
    if not (folder / CHECKPOINT_MARKER).is_file():
        raise UserError(
            f"{folder} is not an RLlib checkpoint (no {CHECKPOINT_MARKER})",
            "pass a checkpoint_NNNNNN folder, a trial folder or an experiment folder",
        )
    manifest = read_manifest(folder)
    if manifest is None:
        notice(f"{folder} has no {MANIFEST} (not written by train.py): its files cannot be verified")
        return None
    check_format(folder, manifest)
    for name, want in manifest["files"].items():
        path = folder / name
        if not path.is_file():
            raise UserError(
                f"damaged checkpoint {folder}: {name} is missing", "pick another checkpoint of the trial"
            )
        size = path.stat().st_size
        if size != want["size"]:
            raise UserError(
                f"damaged checkpoint {folder}: {name} is {size} bytes, the manifest says {want['size']}"
                + (" (truncated)" if size < want["size"] else ""),
                "pick another checkpoint of the trial",
            )
        if _sha256(path) != want["sha256"]:
            raise UserError(
                f"damaged checkpoint {folder}: {name} does not match its checksum",
                "pick another checkpoint of the trial",
            )
    return manifest


class ManifestWriter(tune.Callback):
    """Tune callback: write the manifest once a checkpoint is in its final folder.  ``searched``:
    where the search spaces sit in a trial's config; the manifest keeps what the trial drew there."""

    def __init__(self, run: dict[str, Any], searched: list[tuple[str, ...]]):
        self.run = run  # includes "score_attr", the metric checkpoints are ranked by
        self.searched = searched

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        folder = Path(checkpoint.path)
        if not folder.is_dir():  # remote storage: nothing local to describe
            return
        result = summary(trial.last_result or {}, self.run.get("score_attr"))
        searched = [[list(path), _at(trial.config, path)] for path in self.searched]
        write_manifest(folder, {**self.run, "trial": trial.trial_id, "searched": searched}, result)


def _at(tree: dict[str, Any], path: tuple[str, ...]) -> Any:
    """The value at ``path`` exactly (a key may hold a '/', unlike progress.lookup's paths)."""
    for part in path:
        tree = tree[part]
    return tree


def summary(result: dict[str, Any], score_attr: str | None) -> dict[str, Any]:
    """The part of a training result a checkpoint's manifest keeps (ranking, resuming)."""
    kept = {
        "training_iteration": result.get("training_iteration"),
        "time_total_s": result.get("time_total_s"),
        RETURN: lookup(result, RETURN),
        STEPS: lookup(result, STEPS),
    }
    if score_attr:
        kept[score_attr] = lookup(result, score_attr)
    return kept


@dataclass
class Located:
    """The checkpoint a user's path stands for, and how it was picked."""

    checkpoint: Path
    why: str


def _checkpoints(trial: Path) -> list[Path]:
    return sorted(p for p in trial.glob("checkpoint_*") if p.is_dir() and (p / CHECKPOINT_MARKER).is_file())


def complete_checkpoints(trial: Path) -> list[Path]:
    """A trial's checkpoints whose manifest (written last) exists, oldest first."""
    return [c for c in _checkpoints(trial) if (c / MANIFEST).is_file()]


def score(manifest: dict[str, Any] | None) -> tuple[str, float] | None:
    """(attribute, value) to rank a checkpoint by: the run's score attribute, else the return."""
    if manifest is None:
        return None
    attr = manifest["run"].get("score_attr") or RETURN
    value = manifest["result"].get(attr)
    if not isinstance(value, int | float) or math.isnan(value):
        return None
    return attr, float(value) if manifest["run"].get("score_mode", "max") == "max" else -float(value)


def best_in_trial(trial: Path) -> tuple[Path, float | None, str] | None:
    """(checkpoint, its score, how it was picked): the best by the run's score attribute, else the latest."""
    found = _checkpoints(trial)
    complete = [(c, read_manifest(c)) for c in found if (c / MANIFEST).is_file()]
    if not found:
        return None
    if not complete:
        return found[-1], None, "its latest checkpoint"
    scored = [(c, s) for c, m in complete if (s := score(m)) is not None]
    first = complete[0][1]
    if scored and first is not None and first["run"].get("score_attr"):
        best, (attr, value) = max(scored, key=lambda cs: cs[1][1])
        return best, value, f"its best checkpoint by {attr}"
    latest, manifest = complete[-1]
    ranked = score(manifest)
    return latest, ranked[1] if ranked else None, "its latest checkpoint"


def best_of(trials: list[Path]) -> Located | None:
    """The checkpoint train.py reports and rollout.py picks among several trials.

    Each trial offers :func:`best_in_trial`; the trial whose offer scores
    highest (by the run's score attribute, else the return) wins, else the
    last trial's.  One function, so both tools name the same checkpoint
    whatever ``num_samples`` is.
    """
    offers = [t for t in (best_in_trial(d) for d in sorted(trials) if d.is_dir()) if t]
    if not offers:
        return None
    ranked = [(t, value) for t in offers if (value := t[1]) is not None]
    best = max(ranked, key=lambda tv: tv[1])[0] if ranked else offers[-1]
    by = f" by {_ranked_by(best[0])}" if ranked and len(offers) > 1 else ""
    return Located(best[0], f"{best[2]} of the best trial {best[0].parent.name}{by}")


def _ranked_by(checkpoint: Path) -> str:
    """What a trial's offer was ranked by and its value there: ``env_runners/episode_return_mean 55.5``."""
    manifest = read_manifest(checkpoint)
    ranked = score(manifest)
    if manifest is None or ranked is None:
        return "no score"
    return f"{ranked[0]} {manifest['result'][ranked[0]]:.4g}"


def _several_trials(given: Path, trials: list[Path], trial: str | None) -> Located | None:
    """An experiment folder's checkpoint: the trial named (``trial``: its folder's name, or a part of
    it that only one has), else the best by the run's score, said in a notice where there are several;
    several that nothing ranks are refused with their names."""
    offers = {d.name: offer for d in sorted(trials) if (offer := best_in_trial(d)) is not None}
    names = ", ".join(offers) or "none"
    if trial is not None:
        picked = [n for n in offers if n == trial] or [n for n in offers if trial in n]
        if len(picked) != 1:
            what = "no trial with a checkpoint" if not picked else f"{len(picked)} trials"
            raise UserError(f"{what} in {given} named '{trial}'", f"name one of: {names}")
        checkpoint, _, why = offers[picked[0]]
        return Located(checkpoint, f"{why} of trial {picked[0]}, as asked")
    if len(offers) > 1 and all(value is None for _, value, _ in offers.values()):
        raise UserError(
            f"{given} holds {len(offers)} trials and none has a score to rank it by",
            f"pass one trial's folder, {given}/NAME (NAME: {names})",
        )
    found = best_of(trials)
    if found is not None and len(offers) > 1:
        others = [f"{n} ({_ranked_by(c)})" for n, (c, _, _) in offers.items() if c != found.checkpoint]
        notice(
            f"{given.name} holds {len(offers)} trials: the best, {found.checkpoint.parent.name}"
            f" ({_ranked_by(found.checkpoint)}), is played; the others: {', '.join(others)} (their"
            " folders play them)"
        )
    return found


def locate(path: str | Path, trial: str | None = None) -> Located:
    """Checkpoint folder, a file in one, a trial folder or an experiment folder -> checkpoint.
    ``trial``: in an experiment folder, the trial to take (its folder's name or a unique part of it)."""
    given = Path(path).expanduser()
    if not given.exists():
        raise UserError(f"no such file or folder: {given}", "pass the checkpoint path train.py printed")
    given = given.resolve()
    if given.is_file():  # Ray 1.x paths end in checkpoint_N/checkpoint-N
        given = given.parent
    own = best_in_trial(given) if not (given / CHECKPOINT_MARKER).is_file() else None
    if trial is not None and ((given / CHECKPOINT_MARKER).is_file() or own is not None):
        raise UserError(
            f"{given} is a {'checkpoint' if own is None else 'trial'} folder, not an experiment folder"
            " of trials to pick from",
            f"pass the experiment folder, {given.parent if own is not None else given.parent.parent}",
        )
    if (given / CHECKPOINT_MARKER).is_file():
        return Located(given, "checkpoint")
    if own is not None:
        return Located(own[0], f"{own[2]} of trial {given.name}")
    found = _several_trials(given, [d for d in given.iterdir() if d.is_dir()], trial)
    if found is not None:
        return found
    raise UserError(
        f"no checkpoint in {given}",
        "train with --checkpoint-at-end or --checkpoint-freq N, then pass that folder",
    )
