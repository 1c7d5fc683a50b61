"""The Unity bridge against the stand-in player: real processes, real gRPC, real Xvfb."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from envsdk.envs.spaces import sample_allowed
from envsdk.envs.unity.rllib_env import ALL, UnityEnv, UnityGymEnv, behavior_of
from tests.helpers import PLAYERS, ROOT, needs_xvfb, player_pids
from unity_bridge import observations, side_channels
from unity_bridge.environment import Action, UnityEnvironment
from unity_bridge.errors import LaunchError, PlayerError, ProtocolError, SettingsError
from unity_bridge.protocol import communicator_objects_pb2 as pb
from unity_bridge.settings import LaunchSettings
from unity_bridge.standin.build import write_build

CHASE = str(PLAYERS / "builds" / "Chase")
DODGEBALL = str(PLAYERS / "builds" / "Dodgeball")


@pytest.fixture(autouse=True)
def no_leftovers():
    before = player_pids()
    yield
    deadline = time.time() + 10
    while player_pids() - before and time.time() < deadline:
        time.sleep(0.2)
    assert not player_pids() - before, "a player or Xvfb outlived its env"


def settings(**kw) -> LaunchSettings:
    return LaunchSettings.from_config({"file_name": CHASE, "no_graphics": True, "timeout_wait": 20, **kw})


def env(**kw) -> UnityEnv:
    return UnityEnv({"file_name": CHASE, "no_graphics": True, "timeout_wait": 20, **kw})


# ---- wire format -------------------------------------------------------------


def test_generated_modules_are_current():
    out = subprocess.run(
        [sys.executable, "-m", "unity_bridge.protocol.generate", "--check"], capture_output=True
    )
    assert out.returncode == 0, out.stdout


def test_field_numbers_are_the_wire_format():
    info = pb.AgentInfoProto(reward=1.5, done=True, id=7, group_id=2, group_reward=-1.0)
    # reward is field 7 (fixed32: tag 0x3d), done 8 (0x40), id 10 (0x50), group_id 14 (0x70).
    wire = info.SerializeToString()
    assert wire.startswith(b"\x3d\x00\x00\xc0\x3f\x40\x01\x50\x07\x70\x02")
    spec = pb.UnityMessageProto.DESCRIPTOR
    assert [(f.name, f.number) for f in spec.fields] == [
        ("header", 1),
        ("unity_output", 2),
        ("unity_input", 3),
    ]
    assert pb.DESCRIPTOR.services_by_name["UnityToExternalProto"].full_name == (
        "communicator_objects.UnityToExternalProto"
    )


def test_side_channel_framing_round_trip_and_stats():
    payloads = [
        (
            side_channels.STATS,
            side_channels.Writer().string("a").float32(2.0).int32(side_channels.AVERAGE).bytes(),
        ),
        (
            side_channels.STATS,
            side_channels.Writer().string("a").float32(4.0).int32(side_channels.AVERAGE).bytes(),
        ),
        (
            side_channels.STATS,
            side_channels.Writer().string("s").float32(1.0).int32(side_channels.SUM).bytes(),
        ),
        (
            side_channels.STATS,
            side_channels.Writer().string("s").float32(2.0).int32(side_channels.SUM).bytes(),
        ),
    ]
    data = side_channels.frame(payloads)
    assert data[:16] == side_channels.STATS.bytes_le
    assert list(side_channels.unframe(data)) == payloads
    acc = side_channels.StatsAccumulator()
    for _, payload in side_channels.unframe(data):
        acc.add(payload)
    assert acc.drain() == {"a": 3.0, "s": 3.0}
    assert acc.drain() == {}
    with pytest.raises(ProtocolError, match="claims"):
        list(side_channels.unframe(data[:-3]))


def test_env_parameter_payload_layout():
    payload = side_channels.float_parameter("gravity", 9.5)
    reader = side_channels.Reader(payload)
    assert (reader.string(), reader.int32(), reader.float32()) == ("gravity", 0, 9.5)
    assert reader.exhausted


@pytest.mark.parametrize("layout", ["hwc", "chw"])
def test_png_observations_in_both_layouts_and_channel_mapping(layout):
    import cv2

    rgb = np.zeros((6, 8, 3), np.uint8)
    rgb[:, :, 0], rgb[:, :, 2] = 200, 50
    shape = [6, 8, 3] if layout == "hwc" else [3, 6, 8]
    obs = pb.ObservationProto(shape=shape, compression_type=pb.PNG)
    obs.compressed_data = cv2.imencode(".png", rgb[:, :, ::-1])[1].tobytes()
    out = observations.decode(obs)
    assert out.shape == observations.space_shape(obs) == (6, 8, 3)
    assert np.allclose(out[0, 0], [200 / 255, 0, 50 / 255])
    # Two concatenated PNGs (3 + 1 channels), mapped to 2 channels: R and B averaged, G dropped.
    gray = np.full((6, 8), 100, np.uint8)
    obs.compressed_data += cv2.imencode(".png", gray)[1].tobytes()
    obs.compressed_channel_mapping.extend([0, -1, 0, 1])
    del obs.shape[:]
    obs.shape.extend([6, 8, 2] if layout == "hwc" else [2, 6, 8])
    out = observations.decode(obs)
    assert out.shape == (6, 8, 2)
    assert np.allclose(out[0, 0], [125 / 255, 100 / 255])


# ---- launching ---------------------------------------------------------------


def test_handshake_reset_step_and_log_file(tmp_path):
    game = UnityEnvironment(settings(log_folder=str(tmp_path), env_parameters={"track_length": 4}))
    try:
        steps = game.wait_for_agents(game.reset())
        assert game.specs["Chase"].branches == (3,)
        assert steps[0].obs[0].shape == (3,)
        for _ in range(20):
            for s in steps:
                if not s.done:  # right, unless the game masks it (at the track's end): then stay
                    game.set_actions("Chase", {s.agent_id: Action(discrete=[2 if s.mask[2] else 0])})
            steps = game.wait_for_agents(game.step())
        assert (game.player_stats().threads or 0) > 0
    finally:
        game.close()
    log = (tmp_path / "Player-0.log").read_text()
    assert "connected: trainer speaks 1.5.0" in log
    assert "environment parameter track_length = 4" in log
    assert "trainer closed the connection" in log


def test_version_mismatch_names_both_versions_port_and_log(tmp_path):
    with pytest.raises(LaunchError) as err:
        UnityEnvironment(settings(log_folder=str(tmp_path), additional_args=["--api-version", "2.0.0"]))
    text = str(err.value)
    assert (
        "2.0.0" in text and "1.5.0" in text and "port 50" in text and str(tmp_path / "Player-0.log") in text
    )


def test_missing_and_non_executable_players(tmp_path):
    with pytest.raises(LaunchError, match="not found") as err:
        UnityEnvironment(settings(file_name=str(tmp_path / "Nope")))
    assert "file_name" in err.value.hint
    with pytest.raises(LaunchError, match="not found") as err:  # a stand-in build not written yet
        UnityEnvironment(settings(file_name=str(tmp_path / "builds" / "SeekWatch")))
    assert f"python -m unity_bridge.standin build {tmp_path / 'builds'}" in err.value.hint
    plain = tmp_path / "Game.x86_64"
    plain.write_text("#!/bin/sh\n")
    with pytest.raises(LaunchError, match="not executable"):
        UnityEnvironment(settings(file_name=str(tmp_path / "Game")))  # suffix added, as for Unity builds


def test_player_that_exits_or_never_connects(tmp_path):
    quits = tmp_path / "Quits.x86_64"
    quits.write_text("#!/bin/sh\nexit 7\n")
    quits.chmod(0o755)
    with pytest.raises(LaunchError, match=r"exited before connecting \(exit code 7\)"):
        UnityEnvironment(settings(file_name=str(quits)))
    sleeps = tmp_path / "Sleeps.x86_64"
    sleeps.write_text("#!/bin/sh\nexec sleep 60\n")
    sleeps.chmod(0o755)
    t0 = time.monotonic()
    with pytest.raises(LaunchError, match=r"never connected within timeout_wait=1\.5 s"):
        UnityEnvironment(settings(file_name=str(sleeps), timeout_wait=1.5))
    assert time.monotonic() - t0 < 10


def test_port_in_use_is_skipped_and_exhaustion_is_clear():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        game = UnityEnvironment(settings(base_port=port))
        try:
            assert port < game.port < port + 10
        finally:
            game.close()
        with pytest.raises(LaunchError, match=rf"no free port .* {port}\.\.{port}"):
            UnityEnvironment(settings(base_port=port, port_range=1))


def test_a_port_whose_last_connection_lingers_in_time_wait_is_free():
    """Back-to-back runs on the Editor's fixed port: the closed server's TIME_WAIT must not block it."""
    from unity_bridge.communicator import port_free

    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC's servers do
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            accepted.close()  # the server side closes first, so its end waits in TIME_WAIT
            client.recv(1)
        assert not port_free(port)  # still listening
    if shutil.which("ss"):  # iproute2: confirm the setup left the port in TIME_WAIT
        lingering = subprocess.run(["ss", "-tan", f"sport = :{port}"], capture_output=True, text=True).stdout
        assert "TIME-WAIT" in lingering, lingering
    assert port_free(port)


def test_two_envs_with_the_same_worker_id_get_distinct_ports():  # ray #13412, #13413
    a = UnityEnvironment(settings(base_port=6300))
    b = UnityEnvironment(settings(base_port=6300))
    try:
        assert a.port != b.port
        for game in (a, b):
            assert game.wait_for_agents(game.reset())
    finally:
        a.close()
        b.close()


def test_no_file_name_waits_for_the_editor():
    """The Unity Editor connects to port 5004 when Play is pressed; the stand-in plays the Editor."""
    editor = subprocess.Popen(
        [sys.executable, "-m", "unity_bridge.standin.player", "--mlagents-port", "5004", "-nographics"],
        start_new_session=True,
    )
    try:
        game = UnityEnvironment(LaunchSettings.from_config({"timeout_wait": 20}))
        try:
            assert game.port == 5004 and game.wait_for_agents(game.reset())
        finally:
            game.close()
        assert editor.wait(timeout=10) == 0  # it quit when told to
        with pytest.raises(LaunchError, match="only one env"):
            UnityEnvironment(LaunchSettings.from_config({}), worker_id=33)
    finally:
        editor.kill()


def test_bad_env_config_is_a_user_error():
    with pytest.raises(SettingsError, match=r"(?s)unknown Unity setting 'no_graphic'.*no_graphics"):
        LaunchSettings.from_config({"file_name": CHASE, "no_graphic": True})
    with pytest.raises(SettingsError, match="timeout_wait must be a number"):
        LaunchSettings.from_config({"timeout_wait": "soon"})


@pytest.mark.parametrize("given", ["empty", "missing"])
def test_standin_player_refuses_a_brain_path_without_a_traceback(tmp_path, given):
    """``--brain DIR`` that holds no brains.json, or names nothing: the error and its fix, exit 2."""
    folder = tmp_path / "brains"
    if given == "empty":
        folder.mkdir()
    played = subprocess.run(
        [sys.executable, "-m", "unity_bridge.standin.player", "-nographics", "--brain", str(folder)],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    said = {
        "empty": "no brains.json, the index written beside exported brains",
        "missing": "no such file or folder",
    }[given]
    assert played.returncode == 2, played.stderr
    assert played.stderr.splitlines() == [
        f"error: --brain: {folder}: {said}",
        "  fix: pass the folder the brains were exported into, or one brain's .onnx file",
    ], played.stderr


# ---- the RLlib env -------------------------------------------------------------


def test_per_agent_done_flags():  # ray #17482
    e = env(additional_args=["--agents", "3"], episode_horizon=None)
    try:
        obs, _ = e.reset()
        assert len(obs) == 3
        for k in obs:  # one space per behavior, so the run's actions are the same every time
            e.get_action_space(k).seed(0)
        ended_alone = False
        for _ in range(1000):  # random actions: some agent ends alone long before this
            actions = {k: sample_allowed(e.get_action_space(k), o) for k, o in obs.items()}  # masks honoured
            obs, _, term, trunc, _ = e.step(actions)
            done = [k for k in term if k != ALL and (term[k] or trunc[k])]
            if not e.agents:  # all ended at once (all interrupted at --max-steps): again
                obs, _ = e.reset()
                continue
            if done and len(e.agents) > 0:
                ended_alone = True
                assert not term[ALL] and not trunc[ALL]
                for key in done:
                    assert key in obs  # the last observation comes with the end flag
                    assert key not in e.agents
                break
        assert ended_alone
    finally:
        e.close()


@pytest.mark.parametrize("agents", [2, 5, 16])
def test_agents_that_end_one_by_one_relay_into_short_episodes(agents):
    """Agents that end at different times and come back with new ids do not pile up in one episode.

    Once every agent an episode started with has ended, the live ones (back with new ids) are
    truncated with their current observation and start the next episode from it, with no RESET.
    """
    e = env(additional_args=["--agents", str(agents), "--max-steps", "12"], episode_horizon=None)
    try:
        obs, _ = e.reset()
        relays = 0
        for _episode in range(6):
            starters, seen, done, steps = set(obs), set(obs), set(), 0
            while True:
                actions = {k: sample_allowed(e.get_action_space(k), o) for k, o in obs.items()}
                obs, _, term, trunc, _ = e.step(actions)
                steps += 1
                seen |= set(obs)
                done |= {k for k in term if k != ALL and (term[k] or trunc[k])}
                if term[ALL] or trunc[ALL]:
                    break
            assert steps <= 12 + 1, "an episode outlived its starting agents (12 steps at most each)"
            assert len(seen) <= 3 * agents  # the starters, and those back after them (some end fast)
            assert starters <= done and not (term[ALL] and trunc[ALL])
            last = {k: obs[k] for k in obs if trunc[k]}
            obs, _ = e.reset()
            carried = set(obs) & seen
            if carried:  # a relay: these were truncated with the observation they start the next one from
                relays += 1
                assert trunc[ALL] and carried <= set(last)
                for k in carried:
                    np.testing.assert_array_equal(obs[k]["observations"], last[k]["observations"])
            assert e.agents == sorted(obs)
        assert relays or agents == 2  # two agents often end in the same step
    finally:
        e.close()


def test_group_rewards_reach_every_member():  # ray #21489
    e = UnityEnv({"file_name": DODGEBALL, "no_graphics": True, "additional_args": ["--max-steps", "500"]})
    try:
        obs, _ = e.reset()
        assert {k.split("/")[0] for k in obs} == {"Dodgeball?team=0", "Dodgeball?team=1"}
        assert set(e.policy_specs()) == {"Dodgeball_team_0", "Dodgeball_team_1"}
        for _ in range(600):
            actions = {k: sample_allowed(e.get_action_space(k), o) for k, o in obs.items()}
            obs, rewards, term, trunc, infos = e.step(actions)
            if term[ALL] or trunc[ALL]:
                break
        assert term[ALL], "the round did not end"
        ended = [k for k in term if k != ALL]
        assert len(ended) == 4
        group = {k: infos[k]["group_reward"] for k in ended}
        assert sorted(group.values()) == [-1.0, -1.0, 1.0, 1.0]
        for k in ended:
            assert rewards[k] >= group[k]  # group reward added to the agent's own
        # The next episode starts from the new round's agents without a RESET.
        obs, _ = e.reset()
        assert len(obs) == 4 and not set(obs) & set(ended)
    finally:
        e.close()


def _right_or_stay(obs: dict) -> dict:
    """Chase agents walk right where the game allows it (the stand-in exits on a masked action)."""
    return {k: 2 if o["action_mask"][2] else 0 for k, o in obs.items()}


def test_reset_waits_for_a_first_decision():  # ray #33993
    e = env(additional_args=["--first-decision-after", "5"])
    try:
        obs, _ = e.reset()
        assert len(obs) == 1
    finally:
        e.close()


def test_horizon_gives_every_live_agent_a_last_observation():  # ray #49381
    e = env(
        additional_args=["--agents", "3", "--decision-period", "3", "--max-steps", "1000"], episode_horizon=7
    )
    try:
        obs, _ = e.reset()
        seen_partial = False
        for _ in range(7):
            live = set(e.agents)
            obs, _, _, trunc, _ = e.step({k: 0 for k in obs})
            seen_partial |= 0 < len(obs) < 3  # agents decide at different times
            if trunc[ALL]:
                break
        assert trunc[ALL] and seen_partial
        assert set(obs) == live and all(trunc[k] for k in live)
        assert e.agents == []
        obs, _ = e.reset()  # a real RESET after a cut
        assert obs
    finally:
        e.close()


def test_continuous_and_hybrid_actions():
    for kind, check in (("continuous", "Box"), ("hybrid", "Tuple")):
        e = env(additional_args=["--actions", kind])
        try:
            obs, _ = e.reset()
            (key,) = obs
            space = e.get_action_space(key)
            assert type(space).__name__ == check
            for _ in range(5):
                obs, *_ = e.step({k: sample_allowed(space, o) for k, o in obs.items()}) if obs else e.step({})
        finally:
            e.close()


@pytest.mark.parametrize(
    ("setting", "sent"),
    [("mlagents", [1.0, -2.5 / 3, 0.1 / 3]), ("clip", [1.0, -1.0, 0.1]), ("auto", [1.0, -2.5 / 3, 0.1 / 3])],
)
def test_continuous_actions_reach_the_game_within_its_range(tmp_path, setting, sent):
    """RLlib hands the env a Gaussian policy's unclipped sample; the game gets it in [-1, 1] by the
    chosen mapping (mlagents-learn's by default).  The stand-in exits (status 6) on any value outside,
    as a game that scales a force by its action would misbehave: a real counterpart, checking."""
    from envsdk.envs.unity.rllib_env import to_action

    e = env(additional_args=["--actions", "continuous"], continuous_actions=setting, log_folder=str(tmp_path))
    try:
        spec = next(iter(e.game.specs.values()))
        mapped = to_action(spec, np.array([7.0, -2.5, 0.1], np.float32), e._mapping).continuous
        assert np.allclose(mapped, sent)
        obs, _ = e.reset()
        for value in (7.0, -2.5, 0.1) * 3:
            obs, *_ = e.step({k: np.array([value], np.float32) for k in obs})
        assert e.restart_count == 0
        # Without the mapping, the player refuses the value and ends: the check on its side is live.
        (key,) = obs
        e.game.set_actions(behavior_of(key), {int(key.rsplit("/", 1)[1]): Action(continuous=np.array([2.5]))})
        with pytest.raises(PlayerError):
            e.game.step()
    finally:
        e.close()
    log = "".join(p.read_text() for p in tmp_path.glob("*.log"))
    assert "error: continuous action 2.5 outside [-1, 1]" in log


def test_several_observations_make_a_dict_space():
    e = env(additional_args=["--visual", "8", "--visual-raw"])
    try:
        obs, _ = e.reset()
        space = e.get_observation_space(next(iter(obs)))
        inner = space["observations"]
        assert set(inner.spaces) == {"vector", "camera"}
        value = next(iter(obs.values()))
        assert space.contains(value)
        assert value["observations"]["camera"].shape == (8, 8, 1)
    finally:
        e.close()


def test_gym_view_of_a_one_agent_game():
    from envsdk.envs.checkup.verdict import check_env
    from envsdk.envs.registry import resolve_env

    report = check_env(resolve_env("unity-single"), {"file_name": CHASE, "no_graphics": True}, steps=300)
    assert report.ok, report.render()
    assert any("cannot be reseeded" in w for w in report.warnings)
    single = UnityGymEnv({"file_name": CHASE, "no_graphics": True})
    try:
        obs, _ = single.reset()
        assert single.observation_space.contains(obs)
    finally:
        single.close()
    with pytest.raises(PlayerError, match="one behavior"):
        UnityGymEnv({"file_name": DODGEBALL, "no_graphics": True})


# ---- graphics ------------------------------------------------------------------


@needs_xvfb
def test_real_xvfb_renders_frames_and_no_graphics_is_blank(monkeypatch, capsys):
    from envsdk import notices

    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setattr(notices, "_seen", set())
    args = ["--visual", "16", "--no-vector"]
    e = UnityEnv({"file_name": CHASE, "additional_args": args})  # virtual_display: auto
    try:
        assert e.game.display is not None and e.game.display.startswith(":")
        obs, _ = e.reset()
        frame = next(iter(obs.values()))["observations"]
        assert frame.shape == (16, 16, 1) and frame.max() > 0.3
    finally:
        e.close()
    blank = UnityEnv({"file_name": CHASE, "no_graphics": True, "additional_args": args})
    try:
        assert blank.game.display is None
        obs, _ = blank.reset()
        assert next(iter(obs.values()))["observations"].max() == 0.0
    finally:
        blank.close()
    assert "frames will be blank" in capsys.readouterr().err


def test_graphics_without_any_display_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("DISPLAY", ":93")  # nothing listens there
    with pytest.raises(LaunchError, match="exited before connecting"):
        UnityEnvironment(LaunchSettings.from_config(
            {"file_name": CHASE, "virtual_display": "off", "log_folder": str(tmp_path)}
        ))  # fmt: skip
    assert "Unable to open display :93" in (tmp_path / "Player-0.log").read_text()


# ---- faults --------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["--crash-after", "--hang-after"])
def test_crashed_or_hung_player_is_replaced(fault):
    e = env(additional_args=[fault, "15"], timeout_wait=2, max_restarts=1)
    try:
        obs, _ = e.reset()
        first_pid = e.game._player.pid
        restarted = False
        for _ in range(40):
            obs, _, term, trunc, infos = e.step(_right_or_stay(obs))
            if trunc[ALL] and any(i.get("player_restarted") for i in infos.values()):
                restarted = True
                break
            if term[ALL] or trunc[ALL]:
                obs, _ = e.reset()
        assert restarted and e.restart_count == 1 and e.game._player.pid != first_pid
        with pytest.raises(PlayerError, match="not restarting it again"):
            obs, _ = e.reset()
            for _ in range(40):
                obs, _, term, trunc, _ = e.step(_right_or_stay(obs))
                if term[ALL] or trunc[ALL]:
                    obs, _ = e.reset()
    finally:
        e.close()


@pytest.mark.slow
@needs_xvfb
def test_player_and_xvfb_end_when_the_owner_is_killed(tmp_path):
    script = tmp_path / "owner.py"
    script.write_text(
        "import sys, time\n"
        "from envsdk.envs.unity.rllib_env import UnityEnv\n"
        f"e = UnityEnv({{'file_name': {CHASE!r}, 'virtual_display': 'on'}})\n"
        "print(e.game._player.pid, e.game._display.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    owner = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    player, xvfb = (int(p) for p in owner.stdout.readline().split())
    assert Path(f"/proc/{player}").exists() and Path(f"/proc/{xvfb}").exists()
    owner.send_signal(signal.SIGKILL)  # no clean-up code runs in the owner
    owner.wait()
    deadline = time.time() + 10
    while (Path(f"/proc/{player}").exists() or Path(f"/proc/{xvfb}").exists()) and time.time() < deadline:
        time.sleep(0.2)
    for pid in (player, xvfb):
        alive = Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
        assert not alive, f"process {pid} survived its owner"


def test_standin_build_is_a_plain_executable(tmp_path):
    path = write_build(tmp_path, "Game", ["--game", "chase"])
    assert os.access(path, os.X_OK) and path.name == "Game.x86_64"
    assert sys.executable in path.read_text()


def test_an_earlier_players_log_of_the_same_name_is_moved_aside_not_overwritten(tmp_path):
    """The driver's start-up check, the training game and an export's game share a worker id: each
    player's log is kept (Player-0.log the newest, Player-0.K.log the earlier ones)."""
    from unity_bridge.environment import _keep_earlier

    log = tmp_path / "Player-0.log"
    for text in ("first", "second", "third"):
        _keep_earlier(log)
        log.write_text(text)
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        "Player-0.1.log": "first",
        "Player-0.2.log": "second",
        "Player-0.log": "third",
    }
