"""``rollout.py --out``: every episode's experience in one NumPy ``.npz`` archive.

Load it with one call, ``data = numpy.load("rollout.npz")``; every entry is
a plain array (no pickle).  Keys (``E`` = episode number from 0, ``A`` =
agent id; single-agent runs use the agent id ``agent``):

=================================  ===============================================
``meta``                           JSON text: checkpoint, algorithm, env, env_config,
                                   explore, seed, episode ids, format version
``epE/A/obs``                      observations, T+1 rows (reset + one per step);
                                   Dict/Tuple spaces: ``epE/A/obs/<key>`` per part
``epE/A/actions``                  actions, T rows (``/<key>`` per part likewise)
``epE/A/rewards``                  rewards, T floats
``epE/A/terminated``               T bools, True at the step that ended the episode
``epE/A/truncated``                T bools, True at a time-limit step (or the step
                                   where ``--steps`` cut the last episode)
``epE/A/infos``                    with ``--save-info``: T+1 JSON strings
``epE/length``, ``epE/return``     env steps and summed return of the episode
=================================  ===============================================
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from envsdk.evaluation.evaluator import EpisodeRecord, Trace

FORMAT = 1


def info_json(info: Any) -> str:
    """An info dict (or the run's meta: an env_config may hold gymnasium spaces) as JSON: numpy
    values as lists/numbers, anything else as its repr."""

    def default(value: Any) -> Any:
        if isinstance(value, np.ndarray):
            return value.tolist()
        if isinstance(value, np.generic):
            return value.item()
        return repr(value)

    return json.dumps(info, default=default)


def _leaves(prefix: str, value: Any) -> dict[str, np.ndarray]:
    if isinstance(value, dict):
        out: dict[str, np.ndarray] = {}
        for key, sub in value.items():
            out.update(_leaves(f"{prefix}/{key}", sub))
        return out
    if isinstance(value, tuple | list) and not isinstance(value, np.ndarray):
        out = {}
        for i, sub in enumerate(value):
            out.update(_leaves(f"{prefix}/{i}", sub))
        return out
    if isinstance(value, np.ndarray) and value.dtype == object:  # steps of varying shape: JSON each
        return {f"{prefix}_json": np.asarray([info_json(step) for step in value], dtype=str)}
    return {prefix: np.asarray(value)}


def _flags(trace: Trace, length: int, cut: bool) -> tuple[np.ndarray, np.ndarray]:
    terminated = np.zeros(length, dtype=bool)
    truncated = np.zeros(length, dtype=bool)
    if length:
        terminated[-1] = trace.terminated
        truncated[-1] = trace.truncated or cut
    return terminated, truncated


def arrays(records: list[EpisodeRecord], meta: dict[str, Any], save_info: bool) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {"meta": np.asarray(info_json({**meta, "format": FORMAT}))}
    for e, record in enumerate(records):
        ep = f"ep{e:04d}"
        out[f"{ep}/length"] = np.asarray(record.length)
        out[f"{ep}/return"] = np.asarray(record.ret)
        for agent, trace in record.agents.items():
            base = f"{ep}/{agent}"
            out.update(_leaves(f"{base}/obs", trace.obs))
            out.update(_leaves(f"{base}/actions", trace.actions))
            out[f"{base}/rewards"] = trace.rewards
            steps = len(trace.rewards)
            out[f"{base}/terminated"], out[f"{base}/truncated"] = _flags(trace, steps, not record.complete)
            if save_info:
                out[f"{base}/infos"] = np.asarray([info_json(i) for i in trace.infos], dtype=str)
    return out


def write(path: Path, records: list[EpisodeRecord], meta: dict[str, Any], save_info: bool) -> Path:
    """Write the archive atomically (temporary file, then rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.part")
    with tmp.open("wb") as fh:
        np.savez_compressed(fh, **arrays(records, meta, save_info))  # type: ignore[arg-type]  # numpy: **kwds
    os.replace(tmp, path)
    return path
