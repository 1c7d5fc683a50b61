"""Golden decodings of ML-Agents' sensor kinds by mlagents-envs 1.1.0's own decoder (``rpc_utils``).

Made with the side venv's Python (CI has none; the output is kept beside this script)::

    /root/.cache/envsdk/mlagents-1.1.0/bin/python tests/data/sensors/make_golden.py

Each case is one AgentInfoProto as the wire carries it (``<case>.bytes``: its serialized bytes)
with one observation of a sensor kind, and what ``steps_from_proto`` decodes it to
(``<case>.obs``, the batch of one removed; visual ones channels-first, as mlagents-envs 1.x gives
them) and the dimension properties ``behavior_spec_from_proto`` reads (``<case>.dims``).
tests/unity_bridge/test_sensors.py decodes the same bytes with unity_bridge.observations.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from mlagents_envs.communicator_objects.agent_info_pb2 import AgentInfoProto
from mlagents_envs.communicator_objects.brain_parameters_pb2 import BrainParametersProto
from mlagents_envs.communicator_objects.observation_pb2 import PNG, ObservationProto
from mlagents_envs.rpc_utils import behavior_spec_from_proto, steps_from_proto
from PIL import Image

OUT = Path(__file__).with_name("mlagents_decoded.npz")
rng = np.random.default_rng(58)


def png(pixels: np.ndarray) -> bytes:
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def floats(shape: list[int], values: np.ndarray, dims: list[int] = ()) -> ObservationProto:
    obs = ObservationProto(shape=shape, dimension_properties=list(dims))
    obs.float_data.data.extend(values.astype(np.float32).ravel().tolist())
    return obs


def compressed(shape: list[int], images: list[np.ndarray], mapping: list[int] = ()) -> ObservationProto:
    obs = ObservationProto(shape=shape, compression_type=PNG, compressed_channel_mapping=list(mapping))
    obs.compressed_data = b"".join(png(image) for image in images)
    return obs


def rgb(height: int, width: int) -> np.ndarray:
    return rng.integers(0, 256, (height, width, 3), dtype=np.uint8)


entities = np.zeros((6, 5), np.float32)
entities[:3] = rng.normal(size=(3, 5))
CASES = {
    # RayPerceptionSensor: 5 rays x (3 tags + hit + distance), a plain vector
    "ray_perception": floats([25], rng.uniform(0, 1, 25)),
    # BufferSensor: up to 6 entities of 5, three present, the rest rows of zeros
    "buffer_sensor": floats([6, 5], entities, dims=[4, 1]),
    # GridSensor: 4 channels in two RGB PNGs, the last two channels padding
    "grid_sensor": compressed([4, 10, 12], [rgb(10, 12), rgb(10, 12)], [0, 1, 2, 3, -1, -1]),
    # a mapping that averages pairs of channels
    "grid_merged_channels": compressed([3, 10, 12], [rgb(10, 12), rgb(10, 12)], [0, 0, 1, 1, 2, -1]),
    # CameraSensor, grayscale: an RGB PNG averaged by the mapping [0, 0, 0]
    "camera_grayscale": compressed([1, 16, 16], [rgb(16, 16)], [0, 0, 0]),
    "camera_rgb": compressed([3, 16, 16], [rgb(16, 16)]),
    # a grayscale camera of an API without channel mappings: the first PNG's mean
    "camera_grayscale_no_mapping": compressed([1, 16, 16], [rgb(16, 16)]),
    # a camera sent uncompressed
    "camera_floats": floats([3, 8, 8], rng.uniform(0, 1, (3, 8, 8))),
}

arrays = {}
for name, obs in CASES.items():
    info = AgentInfoProto(id=1, observations=[obs])
    spec = behavior_spec_from_proto(BrainParametersProto(), info)
    decision, _ = steps_from_proto([info], spec)
    arrays[f"{name}.bytes"] = np.frombuffer(info.SerializeToString(), np.uint8)
    arrays[f"{name}.obs"] = decision.obs[0][0]
    arrays[f"{name}.dims"] = np.array([int(d) for d in spec.observation_specs[0].dimension_property])
np.savez_compressed(OUT, **arrays)
print(f"wrote {OUT}: {', '.join(CASES)}")
