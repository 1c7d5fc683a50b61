"""Offline algorithms' data: checked before anything starts; rollout.py's experience files read as data.

``input:`` names recorded experience for BC, MARWIL, CQL and IQL (or any
algorithm learning from data).  :func:`prepare` resolves it, next to the
YAML first, then in the working directory, and makes it something RLlib
2.60 reads:

* an experience file of ``rollout.py --out`` (``.npz``) becomes a folder of
  Parquet transitions beside it (``<file>.rllib/``, rebuilt when the file
  changes), in the columns RLlib's offline pipeline reads by default
  (``obs``, ``new_obs``, ``actions``, ``rewards``, ``terminateds``,
  ``truncateds``, ``eps_id``), so ``rollout.py --out`` and an offline YAML
  fit together;
* so does an ML-Agents demonstration (a ``.demo`` file or a folder of them) of
  vector observations and one discrete branch or continuous actions;
* Ray 1.x JSON output (``output: /tmp/out``) is read as RLlib's old
  ``SampleBatch`` JSON;
* Ray 2.0-2.4's ``input: dataset`` with ``input_config: {format, paths}``
  means those paths in that format.

Data that is not there is an error naming it.  RLlib's settings without a
working default (``dataset_num_iters_per_learner`` with a local learner; a
data pipeline that fits on 2 cores) get one, with a notice.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from envsdk.errors import UserError, said_under
from envsdk.notices import notice

OFFLINE_ALGOS = {"BC", "MARWIL", "CQL", "IQL"}
PIPELINE_CPUS = 0.5  # per pre-learner actor and per read task of the offline data pipeline
ITERATIONS_PER_LEARNER = 10  # batches each learner takes from the data per training iteration
RECORD = "python rollout.py CHECKPOINT --episodes 100 --out data.npz, then input: data.npz"
DEMO = ".demo"
REMOTE = ("s3://", "gs://", "gcs://", "abfs://", "az://", "http://", "https://", "hf://")


def _reads_data(value: Any) -> bool:
    return value not in (None, "sampler") and not isinstance(value, dict)


def check_single_agent(values: Any, algorithm: str, multi_agent: bool) -> None:
    """An offline algorithm on a multi-agent setup, refused before anything starts: RLlib 2.60's
    offline data reads single-agent episodes only (its ``OfflinePreLearner``: "Loading multi-agent
    episodes is currently not supported"), and it would fail inside Ray Data's pipeline."""
    if algorithm in OFFLINE_ALGOS and multi_agent and _reads_data(values.get("input")):
        raise UserError(
            f"{values.where('input')}: {algorithm} on a multi-agent env: RLlib 2.60's offline data reads"
            " one agent's episodes only (multi-agent episodes are not supported yet)",
            "train one agent offline (a single-agent env; env: unity-single for a game with one agent), or"
            " the multi-agent env online (run: PPO)",
        )


def prepare(values: Any, algorithm: str, base: Path) -> None:
    """Resolve and check ``input`` in the translated config ``values`` (a LineDict), in place."""
    where = values.where("input")
    source = values.get("input")
    if source == "dataset":  # Ray 2.0-2.4
        config = values.pop("input_config", None) or {}
        source = config.get("paths")
        if "format" in config:
            values.setdefault("input_read_method", f"read_{config['format']}")
        notice("config key 'input: dataset' reads input_config's paths")
    if not _reads_data(source):
        if algorithm in OFFLINE_ALGOS:
            raise UserError(
                f"{where}: {algorithm} learns from recorded data; the config names none (input: {source})",
                f"record some: {RECORD}",
            )
        return
    paths = [source] if isinstance(source, str) else list(source)
    found = [_resolve(str(p), base, where) for p in paths]
    npz = [p for p in found if isinstance(p, Path) and (p.suffix in (".npz", DEMO) or _demo_folder(p))]
    if npz:
        if len(npz) != len(found):
            raise UserError(
                f"{where}: input mixes rollout.py .npz or .demo files with other data", "give one kind"
            )
        with said_under(where):
            values["input"] = [str(to_parquet(p)) for p in npz]
        values["input_read_method"] = "read_parquet"
        notice(f"input: {', '.join(p.name for p in npz)} read as transitions ({values['input'][0]})")
    else:
        values["input"] = [str(p) for p in found]
        if _is_json(found) and "input_read_method" not in values:
            values["input_read_method"] = "read_json"
            values.setdefault("input_read_sample_batches", True)
            notice("input: JSON files are read as Ray 1.x SampleBatch records")
        elif _recorded_episodes(found, where) and "input_read_episodes" not in values:
            values["input_read_episodes"] = True
            notice("input: read as the whole episodes RLlib's output: records (input_read_episodes: true)")
    _light_pipeline(values)
    if not values.get("num_learners") and values.get("dataset_num_iters_per_learner") is None:
        values["dataset_num_iters_per_learner"] = ITERATIONS_PER_LEARNER
        notice(
            f"dataset_num_iters_per_learner: {ITERATIONS_PER_LEARNER} (RLlib needs it with a local learner)"
        )


def _light_pipeline(values: Any) -> None:
    """Size RLlib's data pipeline to fit beside the learner on a small machine.

    RLlib's defaults start two pre-learner actors of one CPU each, and each
    read task asks for a CPU too: on 2 cores (or beside a Tune trial's actor)
    the reads never get one and the run waits forever, silently.  Here: one
    pre-learner actor per learner and :data:`PIPELINE_CPUS` per actor and per
    read task; the YAML's own settings win.
    """
    learners = int(values.get("num_learners") or 0)
    given_map = values.get("map_batches_kwargs") or {}
    given_read = values.get("input_read_method_kwargs") or {}
    values["map_batches_kwargs"] = {"concurrency": max(1, learners), "num_cpus": PIPELINE_CPUS, **given_map}
    values["input_read_method_kwargs"] = {"num_cpus": PIPELINE_CPUS, **given_read}
    if not given_map and not given_read:
        notice(f"offline data: {max(1, learners)} pre-learner actor(s) and reads of {PIPELINE_CPUS} CPU each")


def _resolve(path: str, base: Path, where: str) -> Path | str:
    if path.startswith(REMOTE):
        return path
    for folder in (base, Path.cwd()):
        candidate = Path(path).expanduser()
        candidate = candidate if candidate.is_absolute() else folder / candidate
        if candidate.exists() or glob.glob(str(candidate)):
            return candidate.resolve() if candidate.exists() else candidate
    looked = (
        "" if Path(path).expanduser().is_absolute() else f" (looked next to the YAML and in {Path.cwd()})"
    )
    raise UserError(f"{where}: the offline data '{path}' is not there{looked}", f"record it first: {RECORD}")


def _recorded_episodes(found: list[Any], where: str) -> bool:
    """Folders of what RLlib's ``output:`` writes by default: whole episodes packed one per row,
    Parquet files of the single column Ray Data names ``item``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [f for item in found if Path(item).is_dir() for f in Path(item).rglob("*.parquet")]
    if not files:
        return False
    try:
        names = pq.read_schema(files[0]).names
    except (pa.ArrowException, OSError) as err:
        raise UserError(
            f"{where}: {files[0]} is not a Parquet file that can be read: {err}",
            "point input at the folder output: (or rollout.py --out) wrote, or remove the damaged file",
        ) from err
    return bool(names == ["item"])


def _is_json(found: list[Any]) -> bool:
    for item in found:
        path = Path(item)
        if path.suffix == ".json" or (path.is_dir() and any(path.glob("*.json"))):
            return True
    return False


def _demo_folder(path: Path) -> bool:
    return path.is_dir() and any(path.glob(f"*{DEMO}"))


def _stamp(source: Path) -> dict[str, Any]:
    """What the cached transitions were made from: the file's (or a folder's .demo files') size and time."""
    files = sorted(source.glob(f"*{DEMO}")) if source.is_dir() else [source]
    return {str(f.name): [f.stat().st_size, f.stat().st_mtime] for f in files}


def to_parquet(npz: Path) -> Path:
    """An experience file (``.npz``), or a ``.demo`` file or folder, as a folder of Parquet transitions
    (cached beside it while it is current)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from ray.data.extensions import ArrowTensorArray

    folder = npz.with_name(npz.name + ".rllib")
    stamp = folder / "source.json"
    mark = _stamp(npz)
    if stamp.is_file() and json.loads(stamp.read_text()) == mark:
        return folder
    rows = transitions(npz) if npz.suffix == ".npz" else demo_transitions(npz)
    tmp = folder.with_name(f".{folder.name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    columns = {
        name: ArrowTensorArray.from_numpy(value) if value.ndim > 1 else pa.array(value)
        for name, value in rows.items()
    }
    pq.write_table(pa.table(columns), tmp / "transitions.parquet")
    (tmp / "source.json").write_text(json.dumps(mark))
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder


def transitions(npz: Path) -> dict[str, np.ndarray]:
    """One row per env step of every single-agent episode in a ``rollout.py --out`` file."""
    data = np.load(npz)
    meta = json.loads(str(data["meta"]))
    if meta.get("multi_agent"):
        raise UserError(f"{npz}: multi-agent experience is not offline data RLlib 2.60 reads", "")
    names = ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds", "eps_id")
    columns: dict[str, list[Any]] = {name: [] for name in names}
    episodes = sorted({k.split("/")[0] for k in data.files if k.startswith("ep")})
    for episode in episodes:
        base = f"{episode}/agent"
        if f"{base}/obs" not in data.files or f"{base}/actions" not in data.files:
            raise UserError(
                f"{npz}: {episode} has Dict/Tuple observations or actions", "use flat spaces offline"
            )
        obs, steps = data[f"{base}/obs"], len(data[f"{base}/rewards"])
        columns["obs"].append(obs[:steps])
        columns["new_obs"].append(obs[1 : steps + 1])
        columns["actions"].append(data[f"{base}/actions"])
        columns["rewards"].append(data[f"{base}/rewards"])
        columns["terminateds"].append(data[f"{base}/terminated"])
        columns["truncateds"].append(data[f"{base}/truncated"])
        columns["eps_id"].append(np.full(steps, f"{npz.stem}-{episode}"))
    if not episodes:
        raise UserError(
            f"{npz}: no episodes in this experience file", "record some with rollout.py --episodes N"
        )
    return {name: np.concatenate(parts) for name, parts in columns.items()}


def demo_transitions(source: Path) -> dict[str, np.ndarray]:
    """One row per recorded step of an ML-Agents demonstration (a file, or a folder of them), in the
    columns of :func:`transitions`; a demonstration that cannot be, refused in its one line."""
    from unity_bridge.demo_files import read_demo  # protobuf and gRPC: only where a run reads a demo
    from unity_bridge.errors import SettingsError

    try:
        rows = read_demo(source).flat_transitions(str(source))
    except SettingsError as err:
        raise UserError(err.message, err.hint) from None
    names = {"terminated": "terminateds", "truncated": "truncateds"}
    columns = {names.get(name, name): value for name, value in rows.items() if name != "episode"}
    return {**columns, "eps_id": np.char.add(f"{source.stem}-ep", rows["episode"].astype(str))}
