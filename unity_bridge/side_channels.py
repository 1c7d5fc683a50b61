"""Side channels: the framed byte messages that ride along with every exchange.

Framing (both directions): messages back to back, each a 16-byte channel
UUID (``uuid.bytes_le``), a little-endian int32 payload length, the payload.
Inside payloads: little-endian int32 / float32 / bool; strings are an int32
length plus ASCII bytes; float lists an int32 count plus the floats.
"""

from __future__ import annotations

import struct
import uuid
from collections import defaultdict
from collections.abc import Iterator

from unity_bridge.errors import ProtocolError
from unity_bridge.samplers import GAUSSIAN, MULTIRANGE, UNIFORM, Sampler

ENGINE_CONFIGURATION = uuid.UUID("e951342c-4f7e-11ea-b238-784f4387d1f7")
ENVIRONMENT_PARAMETERS = uuid.UUID("534c891e-810f-11ea-a9d0-822485860400")
STATS = uuid.UUID("a1d8f7b7-cec8-50f9-b78b-d3e165a78520")

# EngineConfiguration message types.
SCREEN_RESOLUTION, QUALITY_LEVEL, TIME_SCALE, TARGET_FRAME_RATE, CAPTURE_FRAME_RATE = range(5)
# EnvironmentParameters value types and sampler kinds.
PARAM_FLOAT, PARAM_SAMPLER = 0, 1
SAMPLER_KINDS = (UNIFORM, GAUSSIAN, MULTIRANGE)  # the wire's sampler type is the index here
# Stats aggregation kinds.
AVERAGE, MOST_RECENT, SUM, HISTOGRAM = range(4)


class Writer:
    """Builds one payload."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []

    def int32(self, value: int) -> Writer:
        self._parts.append(struct.pack("<i", value))
        return self

    def float32(self, value: float) -> Writer:
        self._parts.append(struct.pack("<f", value))
        return self

    def string(self, value: str) -> Writer:
        raw = value.encode("ascii")
        self._parts.append(struct.pack("<i", len(raw)) + raw)
        return self

    def floats(self, values: list[float]) -> Writer:
        self._parts.append(struct.pack(f"<i{len(values)}f", len(values), *values))
        return self

    def bytes(self) -> bytes:
        return b"".join(self._parts)


class Reader:
    """Reads one payload front to back."""

    def __init__(self, payload: bytes) -> None:
        self._data = payload
        self._at = 0

    def _take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self._at + size > len(self._data):
            raise ProtocolError("side-channel payload ended early")
        values = struct.unpack_from(fmt, self._data, self._at)
        self._at += size
        return values

    def int32(self) -> int:
        return int(self._take("<i")[0])

    def float32(self) -> float:
        return float(self._take("<f")[0])

    def string(self) -> str:
        size = self.int32()
        raw = self._data[self._at : self._at + size]
        if len(raw) != size:
            raise ProtocolError("side-channel string ended early")
        self._at += size
        return raw.decode("ascii")

    def floats(self) -> list[float]:
        count = self.int32()
        return list(self._take(f"<{count}f"))

    @property
    def exhausted(self) -> bool:
        return self._at >= len(self._data)


def frame(messages: list[tuple[uuid.UUID, bytes]]) -> bytes:
    """Concatenate ``(channel, payload)`` messages into the wire format."""
    return b"".join(cid.bytes_le + struct.pack("<i", len(payload)) + payload for cid, payload in messages)


def unframe(data: bytes) -> Iterator[tuple[uuid.UUID, bytes]]:
    """Split wire bytes back into ``(channel, payload)`` messages."""
    at = 0
    while at < len(data):
        if at + 20 > len(data):
            raise ProtocolError(f"side-channel data cut inside a header at byte {at}")
        cid = uuid.UUID(bytes_le=bytes(data[at : at + 16]))
        (size,) = struct.unpack_from("<i", data, at + 16)
        at += 20
        if size < 0 or at + size > len(data):
            raise ProtocolError(f"side-channel message for {cid} claims {size} bytes, {len(data) - at} left")
        yield cid, bytes(data[at : at + size])
        at += size


def engine_configuration(
    *,
    width: int,
    height: int,
    quality_level: int,
    time_scale: float,
    target_frame_rate: int,
    capture_frame_rate: int,
) -> list[bytes]:
    """EngineConfiguration payloads, one per setting, as mlagents-envs sends them."""
    return [
        Writer().int32(SCREEN_RESOLUTION).int32(width).int32(height).bytes(),
        Writer().int32(QUALITY_LEVEL).int32(quality_level).bytes(),
        Writer().int32(TIME_SCALE).float32(time_scale).bytes(),
        Writer().int32(TARGET_FRAME_RATE).int32(target_frame_rate).bytes(),
        Writer().int32(CAPTURE_FRAME_RATE).int32(capture_frame_rate).bytes(),
    ]


def float_parameter(key: str, value: float) -> bytes:
    """EnvironmentParameters payload setting ``key`` to a float."""
    return Writer().string(key).int32(PARAM_FLOAT).float32(float(value)).bytes()


def sampler_parameter(key: str, sampler: Sampler) -> bytes:
    """EnvironmentParameters payload giving ``key`` a sampler (the game draws from it on each read):
    key, SAMPLER, seed, sampler type, then (min, max), (mean, st_dev) or the flattened intervals
    as a float list, as mlagents-envs' EnvironmentParametersChannel writes them."""
    writer = Writer().string(key).int32(PARAM_SAMPLER).int32(sampler.seed)
    writer.int32(SAMPLER_KINDS.index(sampler.kind))
    if sampler.kind == MULTIRANGE:
        return writer.floats(list(sampler.values)).bytes()
    return writer.float32(sampler.values[0]).float32(sampler.values[1]).bytes()


def parameter(key: str, value: float | Sampler) -> bytes:
    """The payload for a number or a sampler."""
    return sampler_parameter(key, value) if isinstance(value, Sampler) else float_parameter(key, value)


def read_parameter(payload: bytes) -> tuple[str, float | Sampler]:
    """An EnvironmentParameters payload back to its key and value (what a game receives)."""
    reader = Reader(payload)
    key, kind = reader.string(), reader.int32()
    if kind == PARAM_FLOAT:
        return key, reader.float32()
    if kind != PARAM_SAMPLER:
        raise ProtocolError(f"environment parameter {key!r}: unknown value type {kind}")
    seed, sampler_type = reader.int32(), reader.int32()
    if not 0 <= sampler_type < len(SAMPLER_KINDS):
        raise ProtocolError(f"environment parameter {key!r}: unknown sampler type {sampler_type}")
    name = SAMPLER_KINDS[sampler_type]
    values = reader.floats() if name == MULTIRANGE else [reader.float32(), reader.float32()]
    return key, Sampler(name, tuple(values), seed)


class StatsAccumulator:
    """Collects what the game sends on the stats channel, aggregated per key."""

    def __init__(self) -> None:
        self._values: dict[str, list[float]] = defaultdict(list)
        self._kind: dict[str, int] = {}

    def add(self, payload: bytes) -> None:
        reader = Reader(payload)
        key, value, kind = reader.string(), reader.float32(), reader.int32()
        self._kind[key] = kind
        if kind == MOST_RECENT:
            self._values[key] = [value]
        else:
            self._values[key].append(value)

    def drain(self) -> dict[str, float]:
        """The aggregate of each key since the last drain (SUM adds, the rest average)."""
        out = {}
        for key, values in self._values.items():
            if values:
                out[key] = sum(values) if self._kind[key] == SUM else sum(values) / len(values)
        self._values.clear()
        return out
