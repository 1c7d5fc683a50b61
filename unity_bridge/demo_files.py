"""ML-Agents' demonstration files (``.demo``), read and written as Unity's DemonstrationRecorder writes them.

A file is a length-prefixed (varint) ``DemonstrationMetaProto`` at byte 0, zero padding up to byte
:data:`INITIAL_POS`, a length-prefixed ``BrainParametersProto`` (the behavior's name and actions),
then one length-prefixed ``AgentInfoActionPairProto`` per record, as mlagents'
``trainers/demo_loader.py`` reads it.  A record is what the agent saw at a decision (its
observations, the reward that came with them, ``done`` on the record that ends an episode) and the
action it took there; the record that ends an episode carries the episode's last observation and
zero actions.

A :class:`Demonstration` holds steps, not records: row ``i`` is an observation, the action taken
at it, and the reward and end-of-episode flags that came with the next record, so that a row is a
transition as offline RL and behavioral cloning read one.  The record that ends an episode (and a
file's last record, where a recording stops mid-episode) becomes the episode's final observation.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
from google.protobuf.message import DecodeError

from unity_bridge import observations
from unity_bridge.environment import _spec as behavior_spec
from unity_bridge.errors import ProtocolError, SettingsError
from unity_bridge.protocol import communicator_objects_pb2 as pb

INITIAL_POS = 33  # where the brain parameters start: the metadata is rewritten in place when a recording ends
API_VERSION = 1
SUPPORTED_VERSIONS = frozenset({0, 1})  # mlagents 1.1.0's SUPPORTED_DEMONSTRATION_VERSIONS
NAME_LENGTH = 16  # Unity's DemonstrationRecorder cuts names to this many characters
SUFFIX = ".demo"

# DimensionPropertyProto's flags: a camera's axes as ML-Agents 2.x lays them out, channels first.
_DIMENSION_NONE, _TRANSLATIONAL = 1, 2
_CHANNELS_FIRST = (_DIMENSION_NONE, _TRANSLATIONAL, _TRANSLATIONAL)
_CHANNELS_LAST = (_TRANSLATIONAL, _TRANSLATIONAL, _DIMENSION_NONE)


_Message = TypeVar(
    "_Message", pb.DemonstrationMetaProto, pb.BrainParametersProto, pb.AgentInfoActionPairProto
)


class DemoFileError(SettingsError):
    """A ``.demo`` file (or a demonstration) that cannot be read, written or used: one line, and a fix."""


@dataclass(frozen=True)
class Demonstration:
    """A behavior's recorded steps, one row per agent decision in file order.

    Visual observations are (height, width, channels), as the bridge hands them to a policy.
    ``dones`` marks the step that ended its episode (``max_step_reached``: ended by the step
    limit, not by the game); ``action_masks`` (True = allowed, one column per discrete choice)
    is None where the recording had none.  ``final_observations`` has one row per episode: the
    observation after its last step (None: unknown, and a written file repeats the last step's).
    """

    behavior_name: str
    observation_shapes: tuple[tuple[int, ...], ...]
    continuous_size: int
    discrete_branches: tuple[int, ...]
    observations: tuple[np.ndarray, ...]
    continuous_actions: np.ndarray
    discrete_actions: np.ndarray
    rewards: np.ndarray
    dones: np.ndarray
    max_step_reached: np.ndarray
    action_masks: np.ndarray | None = None
    final_observations: tuple[np.ndarray, ...] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        rows, finals = len(self.rewards), self.final_observations
        parts: list[tuple[str, np.ndarray, tuple[int, ...]]] = [
            ("continuous_actions", self.continuous_actions, (rows, self.continuous_size)),
            ("discrete_actions", self.discrete_actions, (rows, len(self.discrete_branches))),
            ("dones", self.dones, (rows,)),
            ("max_step_reached", self.max_step_reached, (rows,)),
        ]
        if self.action_masks is not None:
            parts.append(("action_masks", self.action_masks, (rows, sum(self.discrete_branches))))
        wrong = [f"{len(self.observations)} observation arrays for {len(self.observation_shapes)} shapes"]
        if len(self.observations) == len(self.observation_shapes) and (
            finals is None or len(finals) == len(self.observation_shapes)
        ):
            for index, shape in enumerate(self.observation_shapes):
                parts.append((f"observations[{index}]", self.observations[index], (rows, *shape)))
                if finals is not None:
                    parts.append((f"final_observations[{index}]", finals[index], (self.episodes, *shape)))
            wrong = [
                f"{name} is {np.shape(a)}, not {shape}" for name, a, shape in parts if np.shape(a) != shape
            ]
        if wrong:
            raise DemoFileError(f"demonstration of {self.behavior_name!r} does not hold together: {wrong[0]}")

    @property
    def steps(self) -> int:
        return len(self.rewards)

    @property
    def episodes(self) -> int:
        """Episodes with a step: those that ended, and one the recording cut short at its end."""
        ended = int(np.count_nonzero(self.dones))
        return ended + int(self.steps > 0 and not bool(self.dones[-1]))

    def episode_bounds(self) -> list[tuple[int, int]]:
        """Each episode's rows as ``(start, stop)``, in order."""
        ends = [int(i) + 1 for i in np.flatnonzero(self.dones)]
        if self.steps and (not ends or ends[-1] != self.steps):
            ends.append(self.steps)
        return list(zip([0, *ends[:-1]], ends, strict=True))

    def episode_returns(self) -> list[float]:
        return [
            float(self.rewards[start:stop].sum(dtype=np.float64)) for start, stop in self.episode_bounds()
        ]

    def next_observations(self) -> tuple[np.ndarray, ...]:
        """Each row's next observation: its episode's next row's; after its last row the episode's
        final observation (the row's own where that is unknown)."""
        out = tuple(o.copy() for o in self.observations)
        for episode, (start, stop) in enumerate(self.episode_bounds()):
            for index, (following, seen) in enumerate(zip(out, self.observations, strict=True)):
                following[start : stop - 1] = seen[start + 1 : stop]
                finals = self.final_observations
                following[stop - 1] = seen[stop - 1] if finals is None else finals[index][episode]
        return out

    def flat_transitions(self, source: str) -> dict[str, np.ndarray]:
        """One row per step as offline RL reads one: ``obs`` and ``new_obs`` (the vector observations
        concatenated), ``actions`` (the one discrete branch, or the continuous actions), ``rewards``,
        ``terminated``, ``truncated`` and ``episode`` (its number); refused in one line for cameras,
        several branches or hybrid actions.  ``source`` names the demonstration."""
        if any(len(shape) != 1 for shape in self.observation_shapes):
            raise DemoFileError(
                f"{source}: observations {list(self.observation_shapes)} are not all vectors: no flat one",
                "record vector observations only (a camera's frames do not concatenate)",
            )
        if (self.continuous_size and self.discrete_branches) or len(self.discrete_branches) > 1:
            raise DemoFileError(
                f"{source}: actions are {_actions(self.continuous_size, self.discrete_branches)}, not one"
                " discrete branch or continuous actions",
                "record a behavior with one discrete branch, or continuous actions only",
            )
        terminated, truncated = self.episode_ends()
        lengths = [stop - start for start, stop in self.episode_bounds()]
        return {
            "obs": np.concatenate(self.observations, axis=1),
            "new_obs": np.concatenate(self.next_observations(), axis=1),
            "actions": self.discrete_actions[:, 0] if self.discrete_branches else self.continuous_actions,
            "rewards": self.rewards,
            "terminated": terminated,
            "truncated": truncated,
            "episode": np.repeat(np.arange(len(lengths)), lengths),
        }

    def episode_ends(self) -> tuple[np.ndarray, np.ndarray]:
        """``(terminated, truncated)`` per row, as gymnasium says them: ended by the game, or by the
        step limit (and the last row of an episode the recording cut short)."""
        truncated = self.dones & self.max_step_reached
        if self.steps and not self.dones[-1]:
            truncated[-1] = True
        return self.dones & ~self.max_step_reached, truncated


# ---- reading ------------------------------------------------------------------------------------


def demo_files(path: str | os.PathLike[str]) -> list[Path]:
    """The ``.demo`` files ``path`` names: itself, or a folder's, in name order."""
    where = Path(path)
    if where.is_dir():
        found = sorted(p for p in where.iterdir() if p.suffix == SUFFIX and p.is_file())
        if not found:
            raise DemoFileError(f"{where} holds no {SUFFIX} files", "name a .demo file or a folder of them")
        return found
    if not where.exists():
        raise DemoFileError(f"demonstration {where} does not exist", "name a .demo file or a folder of them")
    if where.suffix != SUFFIX:
        raise DemoFileError(f"{where} is not a {SUFFIX} file", "name a .demo file or a folder of them")
    return [where]


def read_demo(path: str | os.PathLike[str]) -> Demonstration:
    """A ``.demo`` file, or a folder of them (one behavior, one layout) merged in name order."""
    files = demo_files(path)
    parts = [_read_file(file) for file in files]
    first = parts[0]
    for file, part in zip(files, parts, strict=True):
        if part.behavior_name != first.behavior_name:
            raise DemoFileError(
                f"{file} records behavior {part.behavior_name!r}, the first file {first.behavior_name!r}",
                "keep one behavior's demonstrations in a folder",
            )
        check_demo(part, first.observation_shapes, first.continuous_size, first.discrete_branches, str(file))
    return parts[0] if len(parts) == 1 else _concatenate(parts)


def _read_file(path: Path) -> Demonstration:
    data = path.read_bytes()
    meta = pb.DemonstrationMetaProto()
    brain = pb.BrainParametersProto()
    (start, size), _ = _frame(data, 0, path, "its metadata")
    _parse(meta, data[start : start + size], path, "its metadata")
    if meta.api_version not in SUPPORTED_VERSIONS:
        raise DemoFileError(
            f"{path} is a version {meta.api_version} demonstration; {sorted(SUPPORTED_VERSIONS)} can be read",
            "record it again with an ML-Agents release this version reads",
        )
    (start, size), at = _frame(data, INITIAL_POS, path, "its brain parameters")
    _parse(brain, data[start : start + size], path, "its brain parameters")
    records: list[pb.AgentInfoActionPairProto] = []
    while at < len(data) and not (meta.number_steps and len(records) == meta.number_steps):
        (start, size), at = _frame(data, at, path, f"record {len(records)}")
        records.append(
            _parse(pb.AgentInfoActionPairProto(), data[start : start + size], path, f"record {len(records)}")
        )
    if not records:
        raise DemoFileError(f"{path} holds no recorded steps", "record at least one episode")
    return _from_records(path, brain, records)


def _read_varint(data: bytes, at: int) -> tuple[int, int] | None:
    value, shift = 0, 0
    while at < len(data) and shift < 64:
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if not byte & 0x80:
            return value, at
        shift += 7
    return None


def _frame(data: bytes, at: int, path: Path, what: str) -> tuple[tuple[int, int], int]:
    """``((start, size), next)`` of the length-prefixed message at ``at``."""
    header = _read_varint(data, at)
    if header is None or header[1] + header[0] > len(data):
        raise DemoFileError(
            f"{path} is cut short or not a demonstration: {what} at byte {at} runs past its end",
            "record the demonstration again; a recording stopped while it was written is incomplete",
        )
    size, start = header
    return (start, size), start + size


def _parse(message: _Message, payload: bytes, path: Path, what: str) -> _Message:
    try:
        message.ParseFromString(payload)
    except DecodeError as error:
        raise DemoFileError(
            f"{path} is corrupt: {what} is not a valid record ({error})", "record the demonstration again"
        ) from None
    return message


def _decode(obs: pb.ObservationProto) -> np.ndarray:
    """One observation, visual ones (H, W, C): a camera's axes as its dimension properties say
    (Unity's recorder sets them), else as the bridge decides for a live game."""
    props = tuple(obs.dimension_properties)
    if obs.compression_type == pb.NONE and props in (_CHANNELS_FIRST, _CHANNELS_LAST):
        array = np.asarray(obs.float_data.data, dtype=np.float32).reshape(tuple(obs.shape))
        return array.transpose(1, 2, 0) if props == _CHANNELS_FIRST else array
    return observations.decode(obs)


def _from_records(
    path: Path, brain: pb.BrainParametersProto, records: list[pb.AgentInfoActionPairProto]
) -> Demonstration:
    try:  # the actions as a live game's brain parameters declare them (the deprecated fields too)
        spec = behavior_spec(brain, records[0].agent_info)
        seen = [[_decode(o) for o in r.agent_info.observations] for r in records]
    except (ProtocolError, ValueError) as error:
        raise DemoFileError(f"{path} is corrupt: {error}", "record the demonstration again") from None
    continuous, branches = spec.continuous, spec.branches
    shapes = tuple(a.shape for a in seen[0])
    for index, (record, arrays) in enumerate(zip(records, seen, strict=True)):
        got = tuple(a.shape for a in arrays)
        if got != shapes:
            raise DemoFileError(
                f"{path}: record {index} has observations {list(got)}, the first record {list(shapes)}",
                "record one behavior per file",
            )
        _check_actions(path, index, record, continuous, branches)
    steps: list[int] = []  # the records that are decisions followed by another record of their episode
    finals: list[int] = []  # the records holding each episode's last observation
    for index, record in enumerate(records):
        if record.agent_info.done or index == len(records) - 1:
            if index == 0 or records[index - 1].agent_info.done:
                continue  # an episode's end with no step before it
            finals.append(index)
        else:
            steps.append(index)
    following = [records[i + 1].agent_info for i in steps]
    masked = branches and any(len(records[i].agent_info.action_mask) == sum(branches) for i in steps)
    return Demonstration(
        behavior_name=brain.brain_name,
        observation_shapes=shapes,
        continuous_size=continuous,
        discrete_branches=branches,
        observations=tuple(_stack([seen[i][k] for i in steps], shape) for k, shape in enumerate(shapes)),
        continuous_actions=np.asarray(
            [_continuous(records[i].action_info, continuous) for i in steps], np.float32
        ).reshape(len(steps), continuous),
        discrete_actions=np.asarray(
            [_discrete(records[i].action_info, continuous, branches) for i in steps], np.int64
        ).reshape(len(steps), len(branches)),
        rewards=np.asarray([info.reward for info in following], np.float32),
        dones=np.asarray([info.done for info in following], bool),
        max_step_reached=np.asarray([info.done and info.max_step_reached for info in following], bool),
        action_masks=_masks([records[i].agent_info for i in steps], sum(branches)) if masked else None,
        final_observations=tuple(
            _stack([seen[i][k] for i in finals], shape) for k, shape in enumerate(shapes)
        ),
    )


def _stack(arrays: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    return np.asarray(arrays, np.float32).reshape(len(arrays), *shape)


def _check_actions(
    path: Path, index: int, record: pb.AgentInfoActionPairProto, continuous: int, branches: tuple[int, ...]
) -> None:
    action = record.action_info
    if not action.continuous_actions and not action.discrete_actions:
        if len(action.vector_actions_deprecated) in (0, continuous + len(branches)):
            return
        got = f"{len(action.vector_actions_deprecated)} action values"
    elif (len(action.continuous_actions), len(action.discrete_actions)) == (continuous, len(branches)):
        return
    else:
        got = (
            f"{len(action.continuous_actions)} continuous and {len(action.discrete_actions)} discrete actions"
        )
    raise DemoFileError(
        f"{path}: record {index} has {got}; its brain parameters say {_actions(continuous, branches)}",
        "record the demonstration again",
    )


def _continuous(action: pb.AgentActionProto, size: int) -> list[float]:
    if action.continuous_actions or action.discrete_actions:
        return list(action.continuous_actions)
    old = list(action.vector_actions_deprecated)  # before API 1.3: one list, continuous first
    return old[:size] if old else [0.0] * size


def _discrete(action: pb.AgentActionProto, continuous: int, branches: tuple[int, ...]) -> list[int]:
    if action.continuous_actions or action.discrete_actions:
        return list(action.discrete_actions)
    old = list(action.vector_actions_deprecated)
    return [int(v) for v in old[continuous:]] if old else [0] * len(branches)


def _masks(infos: list[pb.AgentInfoProto], width: int) -> np.ndarray:
    """True = allowed; a record without a mask allows everything (as mlagents-envs reads one)."""
    rows = np.ones((len(infos), width), bool)
    for row, info in zip(rows, infos, strict=True):
        if len(info.action_mask) == width:
            row[:] = np.logical_not(np.asarray(info.action_mask, bool))
    return rows


def _concatenate(parts: Sequence[Demonstration]) -> Demonstration:
    first = parts[0]
    masked = any(p.action_masks is not None for p in parts)
    width = sum(first.discrete_branches)
    finals = [p.final_observations for p in parts]
    return Demonstration(
        behavior_name=first.behavior_name,
        observation_shapes=first.observation_shapes,
        continuous_size=first.continuous_size,
        discrete_branches=first.discrete_branches,
        observations=tuple(
            np.concatenate([p.observations[k] for p in parts]) for k in range(len(first.observation_shapes))
        ),
        continuous_actions=np.concatenate([p.continuous_actions for p in parts]),
        discrete_actions=np.concatenate([p.discrete_actions for p in parts]),
        rewards=np.concatenate([p.rewards for p in parts]),
        dones=_closed(parts, "dones"),
        max_step_reached=_closed(parts, "max_step_reached"),
        action_masks=np.concatenate(
            [p.action_masks if p.action_masks is not None else np.ones((p.steps, width), bool) for p in parts]
        )
        if masked
        else None,
        final_observations=None
        if any(f is None for f in finals)
        else tuple(
            np.concatenate([f[k] for f in finals if f is not None])
            for k in range(len(first.observation_shapes))
        ),
    )


def _closed(parts: Sequence[Demonstration], flags: str) -> np.ndarray:
    """Each file's ``dones`` (or ``max_step_reached``); an episode a file leaves open ends with it, at
    the step limit (files are recorded apart)."""
    out = []
    for part in parts:
        own = np.array(getattr(part, flags), bool)
        if part.steps and not part.dones[-1]:
            own[-1] = True
        out.append(own)
    return np.concatenate(out)


def check_demo(
    demo: Demonstration,
    observation_shapes: Sequence[Sequence[int]],
    continuous_size: int,
    discrete_branches: Sequence[int],
    source: str,
) -> None:
    """Raise :class:`DemoFileError` (one line: which observation, which shape, or the actions) where
    ``demo`` does not fit a behavior with these spaces.  ``source`` names the demonstration."""
    wanted = tuple(tuple(int(n) for n in shape) for shape in observation_shapes)
    hint = "record the demonstration from the same behavior (or game build) that trains on it"
    if len(demo.observation_shapes) != len(wanted):
        raise DemoFileError(
            f"{source}: {len(demo.observation_shapes)} observations {list(demo.observation_shapes)}, "
            f"the behavior has {len(wanted)} {list(wanted)}",
            hint,
        )
    for index, (have, want) in enumerate(zip(demo.observation_shapes, wanted, strict=True)):
        if have != want:
            raise DemoFileError(
                f"{source}: observation {index} has shape {have}, the behavior's is {want}", hint
            )
    branches = tuple(int(b) for b in discrete_branches)
    if (demo.continuous_size, demo.discrete_branches) != (int(continuous_size), branches):
        raise DemoFileError(
            f"{source}: actions are {_actions(demo.continuous_size, demo.discrete_branches)}, "
            f"the behavior's are {_actions(int(continuous_size), branches)}",
            hint,
        )


def _actions(continuous: int, branches: tuple[int, ...]) -> str:
    return f"{continuous} continuous + discrete branches {list(branches)}"


# ---- writing ------------------------------------------------------------------------------------


def write_demo(path: str | os.PathLike[str], demo: Demonstration) -> None:
    """Write ``demo`` as Unity's recorder would (visual observations channels first, as ML-Agents 2.x
    sends them, with their dimension properties); the file appears whole or not at all."""
    target = Path(path)
    if target.suffix != SUFFIX:
        raise DemoFileError(f"{target} does not end in {SUFFIX}", f"name the file NAME{SUFFIX}")
    for index, shape in enumerate(demo.observation_shapes):
        if not 1 <= len(shape) <= 3:
            raise DemoFileError(
                f"observation {index} has shape {shape}: a .demo file holds 1 to 3 dimensions",
                "flatten the observation, or record it in another format (.npz)",
            )
    records = list(_records(demo))
    meta = pb.DemonstrationMetaProto(
        api_version=API_VERSION,
        number_steps=len(records),
        number_episodes=demo.episodes,
        mean_reward=float(np.mean(demo.episode_returns())) if demo.steps else 0.0,
    )
    meta.demonstration_name = _fitting_name(meta, target.stem)
    brain = pb.BrainParametersProto(brain_name=demo.behavior_name, is_training=True)
    brain.action_spec.num_continuous_actions = demo.continuous_size
    brain.action_spec.num_discrete_actions = len(demo.discrete_branches)
    brain.action_spec.discrete_branch_sizes.extend(demo.discrete_branches)
    head = _delimited(meta)
    body = [_delimited(brain), *(_delimited(r) for r in records)]
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(head.ljust(INITIAL_POS, b"\0"))
            out.writelines(body)
        os.replace(temp, target)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def _fitting_name(meta: pb.DemonstrationMetaProto, stem: str) -> str:
    """The file's name as Unity's recorder cuts it, shortened further until the metadata fits
    before :data:`INITIAL_POS` (where the brain parameters start)."""
    name = "".join(c for c in stem if c.isalnum() or c in "_-")[:NAME_LENGTH]
    trial = pb.DemonstrationMetaProto()
    trial.CopyFrom(meta)
    while name:
        trial.demonstration_name = name
        if len(_delimited(trial)) <= INITIAL_POS:
            break
        name = name[:-1]
    return name


def _delimited(
    message: pb.DemonstrationMetaProto | pb.BrainParametersProto | pb.AgentInfoActionPairProto,
) -> bytes:
    payload = message.SerializeToString()
    size, prefix = len(payload), bytearray()
    while True:
        byte = size & 0x7F
        size >>= 7
        if size:
            prefix.append(byte | 0x80)
        else:
            prefix.append(byte)
            return bytes(prefix) + bytes(payload)


def _records(demo: Demonstration) -> Iterator[pb.AgentInfoActionPairProto]:
    """Each episode's decisions (with the reward the step before earned), then its last observation
    (``done`` where the episode ended, with the last reward and zero actions, as Unity clears them)."""
    no_action = pb.AgentActionProto(
        continuous_actions=[0.0] * demo.continuous_size, discrete_actions=[0] * len(demo.discrete_branches)
    )
    for episode, (start, stop) in enumerate(demo.episode_bounds()):
        reward = 0.0
        for row in range(start, stop):
            info = _info(demo, [o[row] for o in demo.observations], reward)
            if demo.action_masks is not None:
                info.action_mask.extend(np.logical_not(demo.action_masks[row]).tolist())
            action = pb.AgentActionProto(
                continuous_actions=demo.continuous_actions[row].tolist(),
                discrete_actions=demo.discrete_actions[row].tolist(),
            )
            yield pb.AgentInfoActionPairProto(agent_info=info, action_info=action)
            reward = float(demo.rewards[row])
        last = stop - 1
        finals = demo.final_observations
        seen = [f[episode] for f in finals] if finals is not None else [o[last] for o in demo.observations]
        info = _info(demo, seen, reward)
        info.done = bool(demo.dones[last])
        info.max_step_reached = bool(demo.dones[last] and demo.max_step_reached[last])
        yield pb.AgentInfoActionPairProto(agent_info=info, action_info=no_action)


def _info(demo: Demonstration, seen: list[np.ndarray], reward: float) -> pb.AgentInfoProto:
    info = pb.AgentInfoProto(reward=reward)
    for array in seen:
        obs = info.observations.add()
        if array.ndim == 3:  # channels first, marked so, as a Unity 2.x camera sends it
            array = array.transpose(2, 0, 1)
            obs.dimension_properties.extend(_CHANNELS_FIRST)
        obs.shape.extend(array.shape)
        obs.float_data.data.extend(np.asarray(array, np.float32).ravel().tolist())
    return info
