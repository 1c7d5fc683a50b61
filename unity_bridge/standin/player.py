"""The stand-in player: launched like a Unity ML-Agents build, speaks the real protocol.

Unity's own arguments: ``-nographics``, ``-batchmode``, ``--mlagents-port``,
``-logFile PATH`` (``-`` = stdout).  Without ``-nographics`` it opens a real X
window on $DISPLAY (through SDL) and draws the camera frames there; it exits
with "Unable to open display" like a Unity player when there is none.  With
``-nographics`` the cameras give blank frames, as Unity's do.

Stand-in arguments (given through env_config ``additional_args``): ``--game``,
``--agents``, ``--actions``, ``--visual N``, ``--visual-channels``,
``--visual-raw``, ``--visual-layout``, ``--cameras N``, ``--grid N``, ``--no-vector``,
``--decision-period``, ``--max-steps``,
``--first-decision-after``, ``--frame-ms X`` (each frame busy for X ms of CPU, as a game's
physics), and the fault switches ``--crash-at-start``,
``--crash-after N``, ``--hang-after N``, ``--nan-after N`` (every vector observation NaN from
frame N on, as a physics engine that blew up), ``--api-version X``.  Like a game that trusts its action
masks, it exits (status 5, "error: masked action ..." in its log) when an
action it masked arrives; like a game that trusts ML-Agents' range for continuous actions (its
trainers send them within [-1, 1], and Unity passes them on as received), it exits (status 6,
"error: continuous action ... outside [-1, 1]") when one is outside that range or not a number.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING

import cv2
import grpc
import numpy as np

from unity_bridge import side_channels
from unity_bridge.observations import VARIABLE_SIZE, decode
from unity_bridge.protocol import communicator_objects_pb2 as pb
from unity_bridge.samplers import Sampler
from unity_bridge.standin.examples import EXAMPLES
from unity_bridge.standin.game import Game, Report, make_game

if TYPE_CHECKING:
    from unity_bridge.brains import BrainPlayer

EXCHANGE = "/communicator_objects.UnityToExternalProto/Exchange"
DIMENSION_NONE = 1  # DimensionPropertyProto: an axis of fixed size
GRID_CHANNELS = 4  # the stand-in's grid sensor: one channel per scene mark (modulo 4)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="standin-player", allow_abbrev=False)
    p.add_argument("-nographics", action="store_true")
    p.add_argument("-batchmode", action="store_true")
    p.add_argument("--mlagents-port", type=int, default=5004)
    p.add_argument("-logFile", "-logfile", dest="log_file", default=None)
    p.add_argument("--game", default="chase")
    p.add_argument("--agents", type=int, default=1)
    p.add_argument("--actions", choices=("discrete", "continuous", "hybrid"), default="discrete")
    p.add_argument("--visual", type=int, default=0, help="side of a square camera; 0 = none")
    p.add_argument("--visual-channels", type=int, choices=(1, 3), default=1)
    p.add_argument("--visual-raw", action="store_true", help="send frames as floats, not PNG")
    p.add_argument("--visual-layout", choices=("hwc", "chw"), default="chw")
    p.add_argument(
        "--cameras",
        type=int,
        default=1,
        help="cameras per agent (with --visual); the second"
        " and later: grayscale, sent as RGB PNGs with the channel mapping [0, 0, 0]",
    )
    p.add_argument("--grid", type=int, default=0, help="a grid sensor of N x N cells; 0 = none")
    p.add_argument("--no-vector", action="store_true", help="camera only")
    p.add_argument("--decision-period", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=30)
    p.add_argument("--first-decision-after", type=int, default=0)
    p.add_argument("--frame-ms", type=float, default=0.0, help="CPU time of a frame, as a game's physics")
    p.add_argument("--crash-after", type=int, default=0)
    p.add_argument("--crash-at-start", action="store_true", help="exit with status 3 before connecting")
    p.add_argument("--hang-after", type=int, default=0)
    p.add_argument("--nan-after", type=int, default=0)
    p.add_argument("--api-version", default="1.5.0")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--brain", type=Path, help="play with exported brains (a brains.json folder or one .onnx)")
    p.add_argument("--episodes", type=int, default=20, help="with --brain: rounds to play")
    p.add_argument("--stochastic", action="store_true", help="with --brain: sample, not the greedy action")
    args, _ = p.parse_known_args(argv)  # like Unity, ignore what it does not know
    return args


class Log:
    def __init__(self, path: str | None):
        self._out: IO[str] | None = None
        if path == "-":
            self._out = sys.stdout
        elif path:
            self._out = open(path, "w", buffering=1)  # noqa: SIM115 (lives as long as the player)

    def __call__(self, line: str) -> None:
        if self._out is not None:
            self._out.write(f"{time.strftime('%H:%M:%S')} {line}\n")


class Camera:
    """Draws an agent's view: in a real X window with graphics, blank without."""

    def __init__(self, size: int, channels: int, graphics: bool, log: Log):
        self.size, self.channels = size, channels
        self._screen = None
        if graphics:
            os.environ.setdefault("SDL_VIDEODRIVER", "x11")
            os.environ.setdefault("SDL_AUDIODRIVER", "dummy")
            import pygame

            try:
                pygame.display.init()
                self._screen = pygame.display.set_mode((max(size, 1), max(size, 1)))
            except pygame.error as err:
                said = f"Unable to open display {os.environ.get('DISPLAY', '(unset)')}: {err}"
                log(said)
                # Also where a person reads it (a Unity player writes it to its log only): without
                # -logFile the exit would say nothing.
                print(
                    f"stand-in player: {said}; it draws its cameras in a window: give it -nographics"
                    " (env_config: {no_graphics: true}), or a display ($DISPLAY, Xvfb)",
                    file=sys.stderr,
                )
                raise SystemExit(1) from err
            pygame.display.set_caption("stand-in player")
            log(f"graphics: SDL driver {pygame.display.get_driver()} on DISPLAY={os.environ.get('DISPLAY')}")

    def close(self) -> None:
        if self._screen is not None:
            import pygame

            pygame.display.quit()
            self._screen = None

    def frame(self, marks: list[tuple[float, int]]) -> np.ndarray:
        """HWC uint8."""
        if self._screen is None:
            return np.zeros((self.size, self.size, self.channels), np.uint8)
        import pygame

        self._screen.fill((0, 0, 0))
        width = max(1, self.size // 10)
        for where, shade in marks:
            x = round(where * (self.size - width))
            pygame.draw.rect(self._screen, (shade, shade // 2, 255 - shade), (x, 0, width, self.size))
        pygame.display.flip()
        rgb = pygame.surfarray.array3d(self._screen).transpose(1, 0, 2)
        return rgb.mean(axis=2, keepdims=True).astype(np.uint8) if self.channels == 1 else rgb


def _busy(seconds: float) -> None:
    """Spend ``seconds`` of this process's CPU time (a frame's physics), not wall time."""
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


class Player:
    def __init__(self, args: argparse.Namespace, log: Log):
        self.args = args
        self.log = log
        if args.game in EXAMPLES:
            self.game: Game = EXAMPLES[args.game](
                args.agents, args.seed, args.decision_period, args.max_steps
            )
        else:
            self.game = make_game(
                args.game, agents=args.agents, seed=args.seed, decision_period=args.decision_period,
                max_steps=args.max_steps, actions=args.actions,
            )  # fmt: skip
        self.game.log = log
        self.specs = {b.name: b for b in self.game.behaviors}
        cameras = any(self._has_camera(b.name) for b in self.game.behaviors)
        self.camera_size = args.visual or (16 if cameras else 0)
        self.camera = (
            Camera(self.camera_size, args.visual_channels, not args.nographics, self.log)
            if (cameras or not args.nographics)
            else None
        )
        self.announced: set[str] = set()
        self.asked: dict[str, list[int]] = {}  # behavior -> slots, in wire order
        self.masks: dict[int, np.ndarray] = {}  # slot -> the action mask it was last sent (True = forbidden)
        self.steps = 0
        self.silent_frames = 0

    # ---- observations ------------------------------------------------------

    def _has_camera(self, behavior: str) -> bool:
        wanted = self.specs[behavior].camera
        return bool(self.args.visual) if wanted is None else wanted

    def _has_vector(self, behavior: str) -> bool:
        wanted = self.specs[behavior].vector
        return not self.args.no_vector if wanted is None else wanted

    def _visual(self, report: Report) -> pb.ObservationProto:
        a = self.args
        frame = self.camera.frame(self.game.scene(report.agent))  # type: ignore[union-attr]
        c, size = a.visual_channels, self.camera_size
        shape = [size, size, c] if a.visual_layout == "hwc" else [c, size, size]
        obs = pb.ObservationProto(shape=shape, name="camera")
        if a.visual_raw:
            values = frame.astype(np.float32) / 255.0
            if a.visual_layout == "chw":
                values = values.transpose(2, 0, 1)
            obs.float_data.data.extend(values.ravel().tolist())
        else:
            bgr = frame if c == 1 else frame[:, :, ::-1]
            obs.compression_type = pb.PNG
            obs.compressed_data = cv2.imencode(".png", bgr)[1].tobytes()
        return obs

    def _gray_camera(self, report: Report, index: int) -> pb.ObservationProto:
        """A further camera, grayscale as ML-Agents' CameraSensor sends it: an RGB PNG whose three
        channels the mapping [0, 0, 0] averages into one.  It sees the scene mirrored."""
        marks = [(1.0 - where, shade) for where, shade in self.game.scene(report.agent)]
        frame = self.camera.frame(marks)  # type: ignore[union-attr]
        rgb = np.repeat(frame[:, :, :1], 3, axis=2) if frame.shape[2] == 1 else frame
        size = self.camera_size
        shape = [size, size, 1] if self.args.visual_layout == "hwc" else [1, size, size]
        obs = pb.ObservationProto(shape=shape, name=f"camera_{index}", compression_type=pb.PNG)
        obs.compressed_data = cv2.imencode(".png", rgb[:, :, ::-1])[1].tobytes()
        obs.compressed_channel_mapping.extend([0, 0, 0])
        return obs

    def _grid(self, report: Report) -> pb.ObservationProto:
        """A grid sensor, as ML-Agents' GridSensor sends it: its channels three by three in RGB PNGs
        (the last padded), with a channel mapping that drops the padding.  The scene's marks lie on the
        middle row, mark i in channel i % 4 at its brightness."""
        n = self.args.grid
        cells = np.zeros((n, n, 3 * -(-GRID_CHANNELS // 3)), np.uint8)
        for i, (where, shade) in enumerate(self.game.scene(report.agent)):
            column, channel = round(float(np.clip(where, 0, 1)) * (n - 1)), i % GRID_CHANNELS
            cells[n // 2, column, channel] = max(cells[n // 2, column, channel], shade)
        shape = [n, n, GRID_CHANNELS] if self.args.visual_layout == "hwc" else [GRID_CHANNELS, n, n]
        obs = pb.ObservationProto(shape=shape, name="GridSensor", compression_type=pb.PNG)
        obs.compressed_data = b"".join(
            cv2.imencode(".png", cells[:, :, c : c + 3][:, :, ::-1])[1].tobytes()
            for c in range(0, cells.shape[2], 3)
        )
        obs.compressed_channel_mapping.extend([c if c < GRID_CHANNELS else -1 for c in range(cells.shape[2])])
        return obs

    def _entities(self, report: Report, size: tuple[int, int]) -> pb.ObservationProto:
        """A BufferSensor: the game's entity rows, padded with rows of zeros up to its maximum."""
        rows = np.zeros(size, np.float32)
        found = self.game.entities(report.agent)[: size[0]]
        rows[: len(found)] = found
        obs = pb.ObservationProto(shape=list(size), name="BufferSensor")
        obs.dimension_properties.extend([VARIABLE_SIZE, DIMENSION_NONE])
        obs.float_data.data.extend(rows.ravel().tolist())
        return obs

    def _info(self, report: Report) -> pb.AgentInfoProto:
        agent = report.agent
        info = pb.AgentInfoProto(
            reward=agent.reward, done=agent.done, max_step_reached=agent.interrupted, id=agent.episode_id,
            group_id=agent.group_id, group_reward=agent.group_reward,
        )  # fmt: skip
        if self._has_vector(agent.behavior):
            vector = info.observations.add(shape=[len(report.vector)], name="vector")
            values = report.vector.tolist()
            if self.args.nan_after and self.steps >= self.args.nan_after:
                values = [math.nan] * len(values)
            vector.float_data.data.extend(values)
        buffer = self.specs[agent.behavior].buffer
        if buffer is not None:
            info.observations.append(self._entities(report, buffer))
        if self._has_camera(agent.behavior):
            info.observations.append(self._visual(report))
            info.observations.extend(self._gray_camera(report, i) for i in range(1, self.args.cameras))
        if self.args.grid:
            info.observations.append(self._grid(report))
        if report.mask is not None:
            info.action_mask.extend(report.mask.tolist())
            self.masks[agent.slot] = report.mask
        else:
            self.masks.pop(agent.slot, None)
        return info

    def output(self) -> pb.UnityMessageProto:
        message = pb.UnityMessageProto(header=pb.HeaderProto(status=200))
        rl_output = message.unity_output.rl_output
        self.asked = {}
        reports = [] if self.silent_frames > 0 else self.game.reports()
        self.silent_frames = max(0, self.silent_frames - 1)
        for report in reports:
            behavior = report.agent.behavior
            rl_output.agentInfos[behavior].value.append(self._info(report))
            if not report.agent.done:
                self.asked.setdefault(behavior, []).append(report.agent.slot)
        for b in self.game.behaviors:
            if b.name in rl_output.agentInfos and b.name not in self.announced:
                self.announced.add(b.name)
                brain = message.unity_output.rl_initialization_output.brain_parameters.add(
                    brain_name=b.name, is_training=True
                )
                brain.action_spec.num_continuous_actions = b.continuous
                brain.action_spec.num_discrete_actions = len(b.branches)
                brain.action_spec.discrete_branch_sizes.extend(b.branches)
        if self.game.stats:
            rl_output.side_channel = side_channels.frame(
                [(side_channels.STATS, side_channels.Writer().string(k).float32(v).int32(kind).bytes())
                 for k, v, kind in self.game.stats]
            )  # fmt: skip
            self.game.stats = []
        if reports:
            self.game.after_report()
        return message

    # ---- inputs --------------------------------------------------------------

    def apply(self, rl_input: pb.UnityRLInputProto) -> None:
        for cid, payload in side_channels.unframe(rl_input.side_channel):
            if cid == side_channels.ENVIRONMENT_PARAMETERS:
                key, value = side_channels.read_parameter(payload)
                self.game.set_parameter(key, value)
                if isinstance(value, Sampler):
                    self.log(f"environment parameter {key} sampler {value} seed {value.seed}")
                else:
                    self.log(f"environment parameter {key} = {value:g}")
            elif cid == side_channels.ENGINE_CONFIGURATION:
                self.log(f"engine configuration message type {side_channels.Reader(payload).int32()}")
        if rl_input.command == pb.RESET:
            self.game.reset()
            self.silent_frames = self.args.first_decision_after
            self.log("reset")
            return
        actions: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        for behavior, slots in self.asked.items():
            given = list(rl_input.agent_actions[behavior].value) if behavior in rl_input.agent_actions else []
            if len(given) != len(slots):
                self.log(f"error: {len(given)} actions for {len(slots)} agents of {behavior}")
                raise SystemExit(4)
            for slot, action in zip(slots, given, strict=True):
                actions[slot] = (
                    np.asarray(action.continuous_actions, np.float32),
                    np.asarray(action.discrete_actions, np.int64),
                )
                self._check_mask(behavior, slot, actions[slot][1])
                self._check_range(behavior, slot, actions[slot][0])
        self.game.step(actions)
        self.steps += 1
        self._after_frame()

    def _after_frame(self) -> None:
        """A frame's cost (``--frame-ms``) and the fault switches."""
        if self.args.frame_ms:
            _busy(self.args.frame_ms / 1000)
        if self.args.crash_after and self.steps >= self.args.crash_after:
            self.log(f"fault switch: crashing after {self.steps} steps")
            os._exit(3)
        if self.args.hang_after and self.steps >= self.args.hang_after:
            self.log(f"fault switch: hanging after {self.steps} steps")
            while True:
                time.sleep(3600)

    def _check_mask(self, behavior: str, slot: int, discrete: np.ndarray) -> None:
        """Like a game that trusts its masks: a forbidden action is a fatal error here."""
        mask = self.masks.get(slot)
        if mask is None:
            return
        offsets = np.cumsum([0, *self.specs[behavior].branches])[:-1]
        for branch, choice in enumerate(discrete):
            if mask[offsets[branch] + int(choice)]:
                self.log(f"error: masked action {int(choice)} in branch {branch} for {behavior} agent {slot}")
                raise SystemExit(5)

    def _check_range(self, behavior: str, slot: int, continuous: np.ndarray) -> None:
        """Like a game that scales a force by its action: a value outside [-1, 1] is a fatal error here."""
        wrong = ~(np.abs(continuous) <= 1.0)  # NaN too
        if wrong.any():
            value = float(continuous[int(np.argmax(wrong))])
            self.log(f"error: continuous action {value!r} outside [-1, 1] for {behavior} agent {slot}")
            raise SystemExit(6)

    # ---- embedded brains: no trainer ------------------------------------------

    def play(self, brains: BrainPlayer, rounds: int) -> tuple[list[float], list[float]]:
        """Play ``rounds`` rounds with the brains choosing every action, as a Unity build whose agents
        carry a model does.  Observations are what the wire would carry, decoded as the bridge decodes
        them; a round's return is the sum over the agent episodes that end in the same frame (what
        RLlib reports for a multi-agent episode).  Also each agent episode's return (what
        mlagents-learn's mean reward averages)."""
        self.game.reset()
        running: dict[tuple[str, int], float] = {}
        returns: list[float] = []
        agents: list[float] = []
        while len(returns) < rounds:
            message = self.output()
            command = pb.UnityRLInputProto(command=pb.STEP)
            ended: list[float] = []
            for behavior, infos in message.unity_output.rl_output.agentInfos.items():
                asking: list[pb.AgentInfoProto] = []
                for info in infos.value:
                    key = (behavior, info.id)
                    running[key] = running.get(key, 0.0) + info.reward + info.group_reward
                    if info.done:
                        ended.append(running.pop(key))
                        brains.forget(behavior, info.id)
                    else:
                        asking.append(info)
                if asking:
                    self._decide(brains, behavior, asking, command)
            if ended:
                agents.extend(ended)
                returns.append(sum(ended))
                self.log(f"brain: round {len(returns)}: return {returns[-1]:.3f} ({len(ended)} agents)")
            self.apply(command)
        return returns, agents

    def _decide(
        self,
        brains: BrainPlayer,
        behavior: str,
        infos: list[pb.AgentInfoProto],
        command: pb.UnityRLInputProto,
    ) -> None:
        per_agent = [[decode(o) for o in info.observations] for info in infos]
        observations = [np.stack([agent[i] for agent in per_agent]) for i in range(len(per_agent[0]))]
        branches = self.specs[behavior].branches
        masks = [
            1.0 - np.asarray(info.action_mask, np.float32) if info.action_mask else np.ones(sum(branches))
            for info in infos
        ]  # the wire's True = unavailable; a brain's 1 = allowed
        agents = [info.id for info in infos]
        continuous, discrete = brains.act(
            behavior, observations, np.stack(masks) if branches else None, agents
        )
        for c, d in zip(continuous, discrete, strict=True):
            action = command.agent_actions[behavior].value.add()
            action.continuous_actions.extend(c.tolist())
            action.discrete_actions.extend(int(x) for x in d)

    # ---- the protocol loop ---------------------------------------------------

    def run(self) -> int:
        a = self.args
        self.log(f"stand-in player: game {a.game}, port {a.mlagents_port}, graphics {not a.nographics}")
        if a.crash_at_start:
            self.log("fault switch: crashing at start")
            return 3
        channel = grpc.insecure_channel(f"localhost:{a.mlagents_port}")
        call = channel.unary_unary(
            EXCHANGE,
            request_serializer=pb.UnityMessageProto.SerializeToString,
            response_deserializer=pb.UnityMessageProto.FromString,
        )
        try:
            grpc.channel_ready_future(channel).result(timeout=30)
        except grpc.FutureTimeoutError:
            self.log(f"no trainer listening on port {a.mlagents_port}")
            return 1
        hello = pb.UnityMessageProto(header=pb.HeaderProto(status=200))
        init = hello.unity_output.rl_initialization_output
        init.name, init.communication_version, init.package_version = (
            "AcademySingleton",
            a.api_version,
            "stand-in",
        )
        init.capabilities.baseRLCapabilities = True
        reply = call(hello)
        if reply.header.status != 200:
            self.log("trainer refused the connection")
            return 0
        self.log(
            f"connected: trainer speaks {reply.unity_input.rl_initialization_input.communication_version}"
        )
        self.game.rng = np.random.default_rng(reply.unity_input.rl_initialization_input.seed)
        reply = call(pb.UnityMessageProto(header=pb.HeaderProto(status=200)))
        while True:
            if reply.header.status != 200 or reply.unity_input.rl_input.command == pb.QUIT:
                self.log(f"trainer closed the connection after {self.steps} steps")
                return 0
            self.apply(reply.unity_input.rl_input)
            reply = call(self.output())


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    log = Log(args.log_file)  # opened once: reopening would truncate what the player wrote
    if args.brain is not None:
        from unity_bridge.brains import BrainPlayer
        from unity_bridge.errors import SettingsError

        try:
            brains = BrainPlayer(args.brain, not args.stochastic)
            returns, agents = Player(args, log).play(brains, args.episodes)
        except SettingsError as err:  # a brain file to fix: said as the bridge's users are told, no traceback
            print(f"error: --brain: {err}", file=sys.stderr)
            return 2
        for line in (
            f"brain: {len(returns)} rounds, return mean {np.mean(returns):.4f}, std {np.std(returns):.4f}",
            f"brain: {len(agents)} agent episodes, agent return mean {np.mean(agents):.4f},"
            f" std {np.std(agents):.4f}",
        ):
            log(line)
            print(line)
        return 0
    try:
        return Player(args, log).run()
    except grpc.RpcError as err:
        log(f"connection lost: {err.code()}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
