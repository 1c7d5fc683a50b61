"""``output: DIR``: experience recorded while training, in the form RLlib 2.60's offline readers take.

RLlib records with its ``OfflineSingleAgentEnvRunner``: after each sample, Ray Data writes the
sampled episodes (``output_write_method``, Parquet by default) under ``DIR/<env name>/run-<runner>-<n>``,
packed whole with msgpack (``output_write_episodes``, RLlib's default; ``input_read_episodes: true``
reads them back) or as one row per transition; ``output_max_rows_per_file`` holds them back until
that many are buffered (``output_write_remaining_data``: the rest when the runner stops).  RLlib
picks that runner itself where the config names no ``env_runner_cls`` (RLlib's loop:
``ENVSDK_STOCK=1``, ``sampler: rllib``).  Whole episodes it packs as lists, before they become
numpy, which the batched loop never holds (it fills episodes as numpy arrays): recording episodes
samples with RLlib's loop (``why_not_batched`` says so in a notice).  Transitions
(``output_write_episodes: false``) :class:`RecordingEnvRunner` records around the batched loop, with
RLlib's own writer, so ``output:`` records on either sampler.

What RLlib 2.60 cannot record is refused before anything starts (:func:`prepare`): a multi-agent
env (its ``EnvRunnerGroup`` raises once Ray has started) and an ``env_runner_cls`` of the user's
(used instead of the recording runner: nothing would be written).  A run that promised experience
and wrote none has failed (:func:`unwritten`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner
from ray.rllib.offline.offline_env_runner import OfflineSingleAgentEnvRunner

from envsdk.errors import UserError
from envsdk.notices import notice
from envsdk.training.substitutes.sampling.batched_runner import BatchedEnvRunner


class RecordingEnvRunner(BatchedEnvRunner, OfflineSingleAgentEnvRunner):
    """RLlib's recording env runner, sampling with the batched loop: its ``sample`` writes the
    transitions of what :meth:`BatchedEnvRunner._sample` returns."""

    def stop(self) -> None:
        """RLlib's recorder writes what it still holds; then the env closes, as a runner's stop does
        (the recorder's own ``stop`` does not close it: a game's player would outlive the run)."""
        OfflineSingleAgentEnvRunner.stop(self)
        SingleAgentEnvRunner.stop(self)


# Rows a Parquet file of one write may hold (Ray Data's ``min_rows_per_file``): more than a sample has.
ONE_FILE = 1 << 30


def prepare(config: Any, one_file: bool = True) -> None:
    """``output:``: refused where RLlib 2.60 would write nothing, else made absolute (Tune runs a
    trial in its own folder) and named in a notice.  ``one_file`` (substitution
    ``one-file-per-write``): each write of the default ``write_parquet`` is one file, where the config
    gives no ``min_rows_per_file``; RLlib's ``ray.data.from_items`` makes a block of each row, and Ray
    Data writes a file per block (200 files for a sample of 200 transitions, each read back by a
    reader task of its own)."""
    output = config.output
    if not output:
        return
    if not isinstance(output, str):
        raise UserError(
            f"output: {output!r} is not a folder", "give the folder to record experience into: output: DIR"
        )
    if config.is_multi_agent:
        raise UserError(
            "output: RLlib 2.60 records the experience of single-agent envs only (its recording env"
            " runner has no multi-agent form)",
            "drop output:; a trained policy's episodes are recorded by a rollout's experience file",
        )
    if config.env_runner_cls is not None and not issubclass(
        config.env_runner_cls, OfflineSingleAgentEnvRunner
    ):
        raise UserError(
            f"output: env_runner_cls {config.env_runner_cls.__name__} would sample in place of RLlib's"
            " recording env runner, and nothing would be written",
            "drop env_runner_cls or output:",
        )
    folder = Path(output).expanduser().resolve()
    config.offline_data(output=str(folder))
    kwargs = dict(config.output_write_method_kwargs or {})
    if one_file and config.output_write_method == "write_parquet" and "min_rows_per_file" not in kwargs:
        config.offline_data(output_write_method_kwargs={**kwargs, "min_rows_per_file": ONE_FILE})
    what = "episodes (msgpack in Parquet)" if config.output_write_episodes else "transitions"
    notice(f"output: the sampled {what} are written under {folder} as RLlib records them")


def unwritten(output: str | None, since: float) -> list[str]:
    """The promise ``output:`` broke: no file written under it since ``since`` (the run's start)."""
    if not output:
        return []
    folder = Path(output)
    if folder.is_dir() and any(p.is_file() and p.stat().st_mtime >= since for p in folder.rglob("*")):
        return []
    return [
        f"output: {folder} holds no experience written by this run (RLlib's recorder holds rows back"
        " until output_max_rows_per_file, unless output_write_remaining_data, and logs a failed write"
        " and goes on: Ray's log says which)"
    ]
