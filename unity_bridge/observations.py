"""Turning ObservationProto messages into numpy arrays.

Vector observations arrive as floats; visual ones as one or more PNG images
concatenated in ``compressed_data`` (decoded, stacked as channels, remapped
by ``compressed_channel_mapping``).  Visual observations always come out
channels-last (H, W, C) float32 in [0, 1], whatever layout the player wrote
in ``shape`` (mlagents-envs 0.28-0.30 read it as HWC, 1.x as CHW).
"""

from __future__ import annotations

import cv2
import numpy as np

from unity_bridge.errors import ProtocolError
from unity_bridge.protocol import communicator_objects_pb2 as pb

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def is_visual(obs: pb.ObservationProto) -> bool:
    return len(obs.shape) == 3


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


def _decode_png(data: bytes) -> np.ndarray:
    """All PNGs in ``data`` stacked as channels (RGB order), HWC uint8."""
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
    return np.concatenate(planes, axis=2)


def _remap(image: np.ndarray, mapping: list[int]) -> np.ndarray:
    """Average channels mapped to the same output index; drop those mapped to -1."""
    out_channels = max(mapping) + 1
    out = np.zeros((*image.shape[:2], out_channels), dtype=np.float32)
    counts = np.zeros(out_channels, dtype=np.float32)
    for src, dst in enumerate(mapping[: image.shape[2]]):
        if dst >= 0:
            out[:, :, dst] += image[:, :, src]
            counts[dst] += 1
    return out / np.maximum(counts, 1)


def decode(obs: pb.ObservationProto) -> np.ndarray:
    """One observation as float32; visual ones HWC in [0, 1]."""
    target = space_shape(obs)
    if obs.compression_type == pb.NONE:
        data = np.asarray(obs.float_data.data, dtype=np.float32)
        if is_visual(obs) and target != tuple(obs.shape):
            return data.reshape(tuple(obs.shape)).transpose(1, 2, 0)
        return data.reshape(target)
    image = _decode_png(obs.compressed_data).astype(np.float32) / 255.0
    if obs.compressed_channel_mapping:
        image = _remap(image, list(obs.compressed_channel_mapping))
    channels = target[2]
    if image.shape[2] != channels:  # e.g. a grayscale camera sent as an RGB PNG
        return image[:, :, :3].mean(axis=2, keepdims=True) if channels == 1 else image[:, :, :channels]
    return image
