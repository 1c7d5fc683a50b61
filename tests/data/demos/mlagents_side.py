"""Run with mlagents 1.1.0's python (the side venv): its own demonstration loader and writer.

    PY=/root/.cache/envsdk/mlagents-1.1.0/bin/python
    $PY tests/data/demos/mlagents_side.py load FILE.demo OUT.npz [...]  # what demo_loader reads
    $PY tests/data/demos/mlagents_side.py write FILE.demo          # a file written by demo_loader.write_demo

``load`` saves the records as ``load_demonstration`` returns them (done and reward per record) and
the training buffer ``demo_to_buffer`` makes of them (one row per record but the last).  ``write``
makes the file tests/data/demos/mlagents_written.demo holds: a behavior with one vector observation
and one PNG camera (Unity 2.x's channels-first shape), two discrete branches with masks, the actions
in the deprecated field (as players before API 1.3 wrote them), three episodes.
"""

import io
import sys

import numpy as np
from mlagents.trainers.buffer import BufferKey, ObservationKeyPrefix
from mlagents.trainers.demo_loader import demo_to_buffer, load_demonstration, write_demo
from mlagents_envs.communicator_objects.agent_action_pb2 import AgentActionProto
from mlagents_envs.communicator_objects.agent_info_action_pair_pb2 import AgentInfoActionPairProto
from mlagents_envs.communicator_objects.agent_info_pb2 import AgentInfoProto
from mlagents_envs.communicator_objects.brain_parameters_pb2 import BrainParametersProto
from mlagents_envs.communicator_objects.demonstration_meta_pb2 import DemonstrationMetaProto
from mlagents_envs.communicator_objects.observation_pb2 import PNG, ObservationProto
from PIL import Image


def load(path: str, out: str) -> None:
    spec, pairs, expected = load_demonstration(path)
    _, buffer = demo_to_buffer(path, 1)
    arrays = {
        "record_done": np.array([p.agent_info.done for p in pairs], bool),
        "record_reward": np.array([p.agent_info.reward for p in pairs], np.float32),
        "record_max_step": np.array([p.agent_info.max_step_reached for p in pairs], bool),
        "expected": np.array(expected),
        "continuous_size": np.array(spec.action_spec.continuous_size),
        "branches": np.array(spec.action_spec.discrete_branches, np.int64),
        "reward": np.asarray(buffer[BufferKey.ENVIRONMENT_REWARDS], np.float32),
        "done": np.asarray(buffer[BufferKey.DONE], bool),
    }
    for index, obs_spec in enumerate(spec.observation_specs):
        arrays[f"shape_{index}"] = np.array(obs_spec.shape)
        arrays[f"obs_{index}"] = np.asarray(buffer[(ObservationKeyPrefix.OBSERVATION, index)], np.float32)
    if spec.action_spec.continuous_size:
        arrays["continuous"] = np.asarray(buffer[BufferKey.CONTINUOUS_ACTION], np.float32)
    if spec.action_spec.discrete_size:
        arrays["discrete"] = np.asarray(buffer[BufferKey.DISCRETE_ACTION], np.int64)
    np.savez(out, **arrays)


def _png(image: np.ndarray) -> bytes:
    data = io.BytesIO()
    Image.fromarray(image).save(data, format="PNG")
    return data.getvalue()


def write(path: str) -> None:
    rng = np.random.default_rng(59)
    brain = BrainParametersProto(brain_name="Hallway?team=0", is_training=True)
    brain.vector_action_size_deprecated.extend([3, 2])  # discrete (space type 0), before API 1.3
    records = []
    for length in (4, 2, 3):
        for step in range(length + 1):
            done = step == length
            info = AgentInfoProto(reward=0.0 if step == 0 else float(step), done=done, id=7)
            info.max_step_reached = done and length == 2
            vector = ObservationProto(shape=[2])
            vector.float_data.data.extend(rng.uniform(-1, 1, 2).round(3).tolist())
            camera = ObservationProto(shape=[3, 6, 8], compression_type=PNG)
            camera.compressed_data = _png(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
            info.observations.extend([vector, camera])
            if not done:
                info.action_mask.extend([False, step % 2 == 1, False, False, False])
            action = AgentActionProto()
            action.vector_actions_deprecated.extend([0, 0] if done else [step % 3, (step + 1) % 2])
            records.append(AgentInfoActionPairProto(agent_info=info, action_info=action))
    meta = DemonstrationMetaProto(
        api_version=1, demonstration_name="written", number_steps=len(records), number_episodes=3
    )
    write_demo(path, meta, brain, records)


if __name__ == "__main__":
    if sys.argv[1] == "load":
        for demo, npz in zip(sys.argv[2::2], sys.argv[3::2], strict=True):
            load(demo, npz)
    else:
        write(sys.argv[2])
