"""Turning ObservationProto messages into numpy arrays, as mlagents-envs' ``rpc_utils`` decodes them.

Each ML-Agents sensor kind arrives as one of these:

* vector observations and ray perception (``RayPerceptionSensor``): floats, rank 1;
* variable-length observations (``BufferSensor``): floats of rank 2, ``[max entities, entity size]``,
  whose ``dimension_properties`` mark the first axis ``VARIABLE_SIZE``; missing entities are rows of
  zeros (:func:`variable_size`);
* cameras (each camera its own observation) and grid sensors: rank 3, as floats or as one or more
  PNG images concatenated in ``compressed_data`` (decoded, stacked as channels).  With a
  ``compressed_channel_mapping`` (a grid sensor's PNG stack, a grayscale camera sent as RGB) the
  decoded channels map to observation channels: those mapped to one index are averaged, -1 drops
  one.  Without it, one expected channel is the mean of the first PNG's channels, more are the
  first channels of the stack.

Visual observations always come out channels-last (H, W, C) float32 in [0, 1], whatever layout the
player wrote in ``shape`` (mlagents-envs 0.28-0.30 read it as HWC, 1.x as CHW).
"""

from __future__ import annotations

import cv2
import numpy as np

from unity_bridge.errors import ProtocolError
from unity_bridge.protocol import communicator_objects_pb2 as pb

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VARIABLE_SIZE = 4  # DimensionPropertyProto's bit flag: the axis holds a variable number of entities


def is_visual(obs: pb.ObservationProto) -> bool:
    return len(obs.shape) == 3


def variable_size(obs: pb.ObservationProto) -> bool:
    """Whether the observation is a set of entities (a BufferSensor's): its first axis varies in size."""
    props = list(obs.dimension_properties)
    return len(obs.shape) == 2 and bool(props) and bool(props[0] & VARIABLE_SIZE)


def space_shape(obs: pb.ObservationProto) -> tuple[int, ...]:
    """The shape the decoded array will have (visual: H, W, C)."""
    shape = tuple(obs.shape)
    if not is_visual(obs):
        return shape
    if obs.compression_type == pb.PNG and _decoded_hw(obs) == shape[1:]:
        return (shape[1], shape[2], shape[0])
    if obs.compression_type == pb.NONE and shape[0] < min(shape[1], shape[2]):
        return (shape[1], shape[2], shape[0])
    return shape


def _decoded_hw(obs: pb.ObservationProto) -> tuple[int, int]:
    """Height and width of the first PNG, from its header alone (no decoding, no splitting)."""
    data = obs.compressed_data
    if not data.startswith(PNG_SIGNATURE):
        raise ProtocolError("compressed observation does not start with a PNG image")
    # PNG IHDR: width and height are the big-endian int32s at bytes 16..24.
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    return height, width


def _split_png(data: bytes) -> list[bytes]:
    starts = []
    at = data.find(PNG_SIGNATURE)
    while at != -1:
        starts.append(at)
        at = data.find(PNG_SIGNATURE, at + 1)
    if not starts or starts[0] != 0:
        raise ProtocolError("compressed observation does not start with a PNG image")
    return [data[a:b] for a, b in zip(starts, [*starts[1:], len(data)], strict=True)]


def _decode_png(data: bytes) -> list[np.ndarray]:
    """Each PNG in ``data``, HWC uint8 (RGB order)."""
    planes = []
    for image in _split_png(data):
        arr = cv2.imdecode(np.frombuffer(image, np.uint8), cv2.IMREAD_UNCHANGED)
        if arr is None:
            raise ProtocolError("a PNG observation could not be decoded")
        if arr.ndim == 2:
            arr = arr[:, :, None]
        elif arr.shape[2] >= 3:
            arr = arr[:, :, [2, 1, 0, *range(3, arr.shape[2])]]  # OpenCV decodes BGR(A)
        planes.append(arr)
    return planes


def _remap(image: np.ndarray, mapping: list[int]) -> np.ndarray:
    """Average channels mapped to the same output index; drop those mapped to -1 (ProtocolError for
    a mapping that does not fit the image, where mlagents-envs raises too)."""
    used = {m for m in mapping if m > -1}
    if len(mapping) != image.shape[2] or len(used) != max(mapping) + 1:
        raise ProtocolError(
            f"compressed_channel_mapping {mapping} does not fit the {image.shape[2]} channels of its PNGs"
        )
    channels = [image[:, :, [src for src, m in enumerate(mapping) if m == dst]] for dst in range(len(used))]
    return np.stack([c.mean(axis=2) for c in channels], axis=2)


def decode(obs: pb.ObservationProto) -> np.ndarray:
    """One observation as float32; visual ones HWC in [0, 1]."""
    target = space_shape(obs)
    if obs.compression_type == pb.NONE:
        data = np.asarray(obs.float_data.data, dtype=np.float32)
        if is_visual(obs) and target != tuple(obs.shape):
            return data.reshape(tuple(obs.shape)).transpose(1, 2, 0)
        return data.reshape(target)
    planes = [plane.astype(np.float32) / 255.0 for plane in _decode_png(obs.compressed_data)]
    channels = target[2]
    if obs.compressed_channel_mapping:
        image = _remap(np.concatenate(planes, axis=2), list(obs.compressed_channel_mapping))
    elif channels == 1:  # a grayscale camera sent as an RGB PNG
        image = planes[0].mean(axis=2, keepdims=True)
    else:  # the stack's first channels (the last PNG may be padded up to 3)
        image = np.concatenate(planes, axis=2)[:, :, :channels]
    if image.shape != target:
        raise ProtocolError(f"a compressed observation decoded to {image.shape}, its shape says {target}")
    return image
