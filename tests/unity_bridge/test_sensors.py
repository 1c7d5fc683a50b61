"""Every ML-Agents sensor kind, decoded as mlagents-envs decodes it and given the default model it
needs: ray perception (a vector), a BufferSensor's variable-length entities (an EntitySet, read by
entity attention), grid sensors (PNG stacks with a channel mapping) and several cameras per agent
(each its own part, a CNN each); through the stand-in player and the real wire, and against
mlagents-envs' own decoder on the same protobuf bytes (tests/data/sensors, made by its script)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from envsdk.envs.spaces import EntitySet, inner_space
from envsdk.envs.unity.rllib_env import UnityEnv
from envsdk.networks.choice import describe
from tests.helpers import PLAYERS, ROOT
from unity_bridge import observations
from unity_bridge.environment import UnityEnvironment
from unity_bridge.errors import ProtocolError
from unity_bridge.protocol import communicator_objects_pb2 as pb
from unity_bridge.settings import LaunchSettings

GOLDEN = np.load(ROOT / "tests" / "data" / "sensors" / "mlagents_decoded.npz")
CASES = sorted({key.split(".")[0] for key in GOLDEN.files})
SENSORS = ["--visual", "16", "--cameras", "2", "--grid", "8"]  # Chase with two cameras and a grid sensor


def test_every_sensor_kind_has_a_golden_decoding():
    assert {"ray_perception", "buffer_sensor", "grid_sensor", "camera_grayscale"} <= set(CASES)


@pytest.mark.parametrize("case", CASES)
def test_decoded_as_mlagents_envs_decodes_the_same_bytes(case):
    info = pb.AgentInfoProto.FromString(GOLDEN[f"{case}.bytes"].tobytes())
    (obs,) = info.observations
    want = GOLDEN[f"{case}.obs"]
    if want.ndim == 3:  # mlagents-envs 1.x gives channels first, the bridge channels last
        want = want.transpose(1, 2, 0)
    got = observations.decode(obs)
    assert got.dtype == np.float32 and got.shape == observations.space_shape(obs) == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    assert observations.variable_size(obs) == bool(GOLDEN[f"{case}.dims"][0] & observations.VARIABLE_SIZE)


@pytest.mark.parametrize(("mapping", "channels"), [([0, 1, 2, 3, -1], 4), ([0, 2, 2], 3)])
def test_a_channel_mapping_that_does_not_fit_its_pngs_is_a_protocol_error(mapping, channels):
    """mlagents-envs refuses these too: a mapping longer or shorter than the PNGs' channels, or one
    that skips an index."""
    grid = pb.ObservationProto.FromString(
        pb.AgentInfoProto.FromString(GOLDEN["grid_sensor.bytes"].tobytes())
        .observations[0]
        .SerializeToString()
    )
    del grid.compressed_channel_mapping[:]
    grid.compressed_channel_mapping.extend(mapping)
    grid.shape[0] = channels
    with pytest.raises(ProtocolError, match="compressed_channel_mapping"):
        observations.decode(grid)


def launch(build: str, tmp_path, **config) -> UnityEnvironment:
    settings = {
        "file_name": str(PLAYERS / "builds" / build),
        "no_graphics": True,
        "log_folder": str(tmp_path),
    }
    return UnityEnvironment(LaunchSettings.from_config({**settings, **config}))


@pytest.mark.parametrize("tiles", [1, 5, 20])
def test_the_sorter_sends_a_buffer_sensor_of_its_tiles_padded_with_zeros(tiles, tmp_path):
    game = launch("Sorter", tmp_path, env_parameters={"num_tiles": tiles})
    try:
        steps = game.wait_for_agents(game.reset())
        (spec,) = game.specs.values()
        assert [(o.name, o.shape, o.variable_size) for o in spec.observations] == [
            ("vector", (4,), False),
            ("BufferSensor", (20, 23), True),
        ]
        assert spec.branches == (3, 3, 3)
        for step in steps:
            vector, entities = step.obs
            real = entities.any(axis=1)
            assert real.sum() == tiles and not real[tiles:].any()  # the tiles first, then padding rows
            values = np.argmax(entities[:tiles, :20], axis=1) + 1
            assert len(set(values)) == tiles and (entities[:tiles, :20].sum(axis=1) == 1).all()
            assert (entities[:tiles, 22] == 0).all()  # none visited yet
            where = vector[0] + entities[:tiles, 20]  # the tiles' places on the track, relative to its length
            assert (where >= 0).all() and (where <= 1).all() and (entities[:, 21] == 0).all()
    finally:
        game.close()


def test_two_cameras_and_a_grid_sensor_arrive_each_as_its_own_part(tmp_path):
    game = launch("Chase", tmp_path, additional_args=SENSORS)
    try:
        steps = game.wait_for_agents(game.reset())
        (spec,) = game.specs.values()
        assert [(o.name, o.shape) for o in spec.observations] == [
            ("vector", (3,)),
            ("camera", (16, 16, 1)),
            ("camera_1", (16, 16, 1)),  # grayscale: an RGB PNG averaged by the mapping [0, 0, 0]
            ("GridSensor", (8, 8, 4)),  # 4 channels in two RGB PNGs, the padding dropped by the mapping
        ]
        for step in steps:
            (position, target, _), grid = step.obs[0], step.obs[3]
            lit = {(int(r), int(c), int(ch)): grid[r, c, ch] for r, c, ch in np.argwhere(grid)}
            # the stand-in's grid: the target (brightness 255) in channel 0, the agent (128) in 1
            assert lit[(4, round(target * 7), 0)] == 1.0
            assert lit[(4, round(position * 7), 1)] == pytest.approx(128 / 255)
            assert len(lit) == 2
    finally:
        game.close()


@pytest.mark.parametrize(
    ("build", "args", "parts"),
    [
        ("Sorter", [], {"vector": "flattened", "BufferSensor": "entity attention 128"}),
        ("Chase", SENSORS, {"camera": "CNN", "camera_1": "CNN", "GridSensor": "CNN", "vector": "flattened"}),
    ],
)
def test_each_sensor_gets_its_default_model(build, args, parts, tmp_path):
    build_path = str(PLAYERS / "builds" / build)
    env = UnityEnv(
        {"file_name": build_path, "no_graphics": True, "additional_args": args, "log_folder": str(tmp_path)}
    )
    try:
        ((obs_space, act_space),) = env.policy_specs().values()
        obs, _ = env.reset()
        assert all(obs_space.contains(o) for o in obs.values())
    finally:
        env.close()
    sets = [name for name, part in inner_space(obs_space).spaces.items() if isinstance(part, EntitySet)]
    assert sets == (["BufferSensor"] if build == "Sorter" else [])
    line = describe(obs_space, act_space)
    for name, model in parts.items():
        assert re.search(rf"\b{name} [^+]*{model}", line), line


@pytest.mark.slow
def test_mlagents_sorter_curriculum_config_runs_unchanged_on_the_standin_sorter(standin_builds, tmp_path):
    config = ROOT / "tests" / "data" / "mlagents_configs" / "Sorter_curriculum.ppo.yaml"
    out = subprocess.run(
        [sys.executable, "train.py", str(config), "--env", str(standin_builds / "Sorter"), "--no-graphics",
         "--results-dir", str(tmp_path / "r"), "--stop-iters", "1",
         "--config.min_sample_timesteps_per_iteration=0",
         # the file's buffer of 40,960 agent steps takes minutes here: a smaller one, the same file else
         "--config.train_batch_size=1024", "--config.minibatch_size=256"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert re.search(
        r"model Sorter: vector Box\(4,\) flattened \+ BufferSensor set of up to 20 entities x 23"
        r" -> entity attention",
        out.stdout,
    )
