"""A running Unity game, seen through the protocol: behaviors, agent steps, actions.

:class:`UnityEnvironment` owns one player process, its gRPC server and, when
needed, its Xvfb.  It knows nothing about RLlib; ``envsdk.envs.unity.rllib_env``
adapts it.  Typical use::

    game = UnityEnvironment(LaunchSettings(file_name="builds/Chase"))
    steps = game.reset()
    while ...:
        game.set_actions("Chase", {agent_id: Action(discrete=[1])})
        steps = game.step()
    game.close()
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from unity_bridge import observations, side_channels
from unity_bridge.communicator import EDITOR_PORT, Communicator
from unity_bridge.display import VirtualDisplay, child_environment, needs_virtual_display
from unity_bridge.errors import LaunchError, PlayerClosed, PlayerError, PlayerTimeout, VersionMismatch
from unity_bridge.player import PlayerProcess, ProcessStats, command_line, find_executable
from unity_bridge.protocol import communicator_objects_pb2 as pb
from unity_bridge.samplers import Sampler, with_seeds
from unity_bridge.settings import LaunchSettings


@dataclass(frozen=True)
class ObservationSpec:
    name: str
    shape: tuple[int, ...]  # visual: (H, W, C)
    variable_size: bool = False  # a BufferSensor's (max entities, entity size), rows of zeros padding

    @property
    def visual(self) -> bool:
        return len(self.shape) == 3


@dataclass(frozen=True)
class BehaviorSpec:
    name: str
    observations: tuple[ObservationSpec, ...]
    continuous: int
    branches: tuple[int, ...]


@dataclass
class AgentStep:
    """What one agent reported in one round."""

    behavior: str
    agent_id: int
    obs: list[np.ndarray]
    reward: float
    done: bool
    interrupted: bool
    group_id: int
    group_reward: float
    mask: np.ndarray | None  # 1 = action allowed, one entry per discrete choice


@dataclass
class Action:
    continuous: np.ndarray | list[float] = field(default_factory=list)
    discrete: np.ndarray | list[int] = field(default_factory=list)


def _spec(brain: pb.BrainParametersProto, info: pb.AgentInfoProto) -> BehaviorSpec:
    spec = brain.action_spec
    continuous, branches = spec.num_continuous_actions, tuple(spec.discrete_branch_sizes)
    if continuous == 0 and not branches:  # players older than API 1.3 fill only the deprecated fields
        sizes = tuple(brain.vector_action_size_deprecated)
        if brain.vector_action_space_type_deprecated == pb.continuous:
            continuous = sum(sizes)
        else:
            branches = sizes
    obs = tuple(
        ObservationSpec(o.name or f"obs_{i}", observations.space_shape(o), observations.variable_size(o))
        for i, o in enumerate(info.observations)
    )
    return BehaviorSpec(brain.brain_name, obs, continuous, branches)


def _agent_step(behavior: str, info: pb.AgentInfoProto, spec: BehaviorSpec) -> AgentStep:
    mask = None
    if spec.branches and len(info.action_mask) == sum(spec.branches):
        mask = np.logical_not(np.asarray(info.action_mask, dtype=bool)).astype(np.int8)
    return AgentStep(
        behavior=behavior,
        agent_id=info.id,
        obs=[observations.decode(o) for o in info.observations],
        reward=info.reward,
        done=info.done,
        interrupted=info.max_step_reached,
        group_id=info.group_id,
        group_reward=info.group_reward,
        mask=mask,
    )


class UnityEnvironment:
    """One player process, launched, handshaken and ready for ``reset``."""

    def __init__(
        self,
        settings: LaunchSettings,
        *,
        worker_id: int = 0,
        search: Iterable[Path] = (),
        notice: Callable[[str], None] = print,
    ):
        """``notice`` says one-line news (waiting for the Editor); envsdk passes its own."""
        self.settings = settings
        self.notice = notice
        self.worker_id = worker_id
        self._search = [Path(p) for p in search]
        self.specs: dict[str, BehaviorSpec] = {}
        self.stats = side_channels.StatsAccumulator()
        self._brains: dict[str, pb.BrainParametersProto] = {}
        self._asked: dict[str, list[int]] = {}  # agents that asked for a decision, in wire order
        self._actions: dict[str, dict[int, Action]] = {}
        self._outgoing: list[tuple[uuid.UUID, bytes]] = []
        # What the game was last sent per environment parameter, sent again to a restarted player.
        # Samplers without a seed get one from the handshake seed, as mlagents-learn's from its run seed.
        self.parameters: dict[str, float | Sampler] = with_seeds(settings.env_parameters, settings.seed)
        self._display: VirtualDisplay | None = None
        self._player: PlayerProcess | None = None
        self._comm: Communicator | None = None
        self.port = -1
        self.log_file: Path | None = None
        self.launch()

    # ---- lifecycle ---------------------------------------------------------

    def launch(self) -> None:
        """Start (or restart) the player and shake hands with it."""
        s = self.settings
        self._comm, self.port = self._bind()
        try:
            graphics = s.file_name is not None and not s.no_graphics
            if self._display is None and needs_virtual_display(s.virtual_display, not graphics, s.display):
                self._display = VirtualDisplay(s.width, s.height)
            display = self._display.name if self._display else s.display
            self.log_file = None
            if s.file_name is None:
                self.notice(
                    f"waiting {s.timeout_wait:g} s for the Unity Editor on port {self.port}: press Play"
                )
                self._handshake()
                return
            if s.log_folder is not None:
                Path(s.log_folder).mkdir(parents=True, exist_ok=True)
                self.log_file = Path(s.log_folder).resolve() / f"Player-{self.worker_id}.log"
                _keep_earlier(self.log_file)
            executable = find_executable(s.file_name, self._search)
            args = command_line(
                executable,
                port=self.port,
                no_graphics=s.no_graphics,
                log_file=self.log_file,
                additional_args=s.additional_args,
            )
            extra = [self._display.pid] if self._display else []
            self._player = PlayerProcess(args, child_environment(display), extra)
            self._handshake()
        except BaseException:
            self.close()
            raise

    def _bind(self) -> tuple[Communicator, int]:
        if self.settings.file_name is None:  # the Unity Editor always connects to its own port
            if self.worker_id != 0:
                raise LaunchError(
                    "without file_name the bridge connects to the one Unity Editor, so only one env can run",
                    "set num_env_runners: 0, or build the game and set env_config file_name",
                )
            comm = Communicator(EDITOR_PORT)
            if not comm.bind():
                raise LaunchError(f"the Unity Editor's port {EDITOR_PORT} is in use", "stop its listener")
            return comm, EDITOR_PORT
        first = self.settings.base_port + self.worker_id
        for port in range(first, first + self.settings.port_range):
            comm = Communicator(port)
            if comm.bind():
                return comm, port
        raise LaunchError(
            f"no free port for the Unity player in {first}..{first + self.settings.port_range - 1}",
            "stop other players on those ports, or set env_config base_port to a free range",
        )

    def _where(self) -> str:
        if self.settings.file_name is None:
            return f"Unity Editor, port {self.port}"
        log = f"log {self.log_file}" if self.log_file else "no log (set env_config log_folder to keep one)"
        player = self._player.args[0] if self._player else self.settings.file_name
        return f"player {player}, port {self.port}, {log}"

    def _alive(self) -> bool:
        return self._player.alive() if self._player is not None else self.settings.file_name is None

    def _returncode(self) -> int | None:
        return self._player.returncode if self._player is not None else None

    def _handshake(self) -> None:
        assert self._comm is not None
        try:
            self._comm.handshake(
                seed=self.settings.seed,
                num_areas=self.settings.num_areas,
                timeout=self.settings.timeout_wait,
                alive=self._alive,
            )
        except PlayerClosed as err:
            code = self._returncode()
            raise LaunchError(
                f"the Unity player exited before connecting (exit code {code}): {self._where()}",
                "read the player's log; a player with graphics needs an X display (virtual_display: auto)",
            ) from err
        except PlayerTimeout as err:
            raise LaunchError(
                f"the Unity player never connected within timeout_wait={self.settings.timeout_wait:g} s:"
                f" {self._where()}",
                "check that it is an ML-Agents build, or raise env_config timeout_wait",
            ) from err
        except VersionMismatch as err:
            raise LaunchError(
                f"{err}: {self._where()}", "rebuild the game with com.unity.ml-agents 2.x or 3.x"
            ) from err
        s = self.settings
        for payload in side_channels.engine_configuration(
            width=s.width,
            height=s.height,
            quality_level=s.quality_level,
            time_scale=s.time_scale,
            target_frame_rate=s.target_frame_rate,
            capture_frame_rate=s.capture_frame_rate,
        ):
            self._outgoing.append((side_channels.ENGINE_CONFIGURATION, payload))
        for key, value in self.parameters.items():
            self.set_parameter(key, value)

    def close(self) -> None:
        """End the player, its server and its Xvfb. Safe to call more than once."""
        told_to_quit = self._comm is not None
        if self._comm is not None:
            self._comm.close()
            self._comm = None
        if self._player is not None:
            self._player.stop(exit_wait=2.0 if told_to_quit else 0.0)
            self._player = None
        if self._display is not None:
            self._display.stop()
            self._display = None

    def restart(self) -> None:
        """Replace a crashed or hung player with a fresh one (the Xvfb is kept)."""
        if self._comm is not None:
            self._comm.close()
        if self._player is not None:
            self._player.stop()
        self._comm = self._player = None
        self._asked.clear()
        self._actions.clear()
        if self.log_file is not None and self.log_file.exists():  # keep the failed player's log
            self.log_file.replace(self.log_file.with_suffix(".previous.log"))
        self.launch()

    def player_stats(self) -> ProcessStats | None:
        return self._player.stats() if self._player else None

    @property
    def display(self) -> str | None:
        return self._display.name if self._display else None

    # ---- protocol ----------------------------------------------------------

    def set_parameter(self, key: str, value: float | Sampler) -> None:
        """Send a number or a sampler through the environment-parameters channel with the next
        exchange (a sampler as a sampler: the game draws from it each time it reads ``key``)."""
        self.parameters[key] = value if isinstance(value, Sampler) else float(value)
        self._outgoing.append((side_channels.ENVIRONMENT_PARAMETERS, side_channels.parameter(key, value)))

    def set_actions(self, behavior: str, actions: dict[int, Action]) -> None:
        self._actions.setdefault(behavior, {}).update(actions)

    def reset(self) -> list[AgentStep]:
        return self._exchange(pb.RESET)

    def step(self) -> list[AgentStep]:
        return self._exchange(pb.STEP)

    def _exchange(self, command: pb.CommandProto) -> list[AgentStep]:
        if self._comm is None:
            raise PlayerClosed("the player is not running")
        message = pb.UnityRLInputProto(command=command)
        if self._outgoing:
            message.side_channel = side_channels.frame(self._outgoing)
            self._outgoing = []
        if command == pb.STEP:
            self._fill_actions(message)
        self._actions.clear()
        try:
            output = self._comm.exchange(message, timeout=self.settings.timeout_wait, alive=self._alive)
        except PlayerTimeout as err:
            raise PlayerTimeout(f"{err}: {self._where()}") from err
        except PlayerClosed as err:
            raise PlayerClosed(f"{err} (exit code {self._returncode()}): {self._where()}") from err
        return self._read(output)

    def _fill_actions(self, message: pb.UnityRLInputProto) -> None:
        for behavior, agent_ids in self._asked.items():
            spec = self.specs[behavior]
            chosen = self._actions.get(behavior, {})
            listed = message.agent_actions[behavior].value
            for agent_id in agent_ids:
                action = chosen.get(agent_id)
                proto = listed.add()
                if action is None:  # no decision given: zeros, as mlagents-envs sends
                    proto.continuous_actions.extend([0.0] * spec.continuous)
                    proto.discrete_actions.extend([0] * len(spec.branches))
                else:
                    proto.continuous_actions.extend(
                        np.asarray(action.continuous, dtype=np.float32).ravel().tolist()
                    )
                    proto.discrete_actions.extend(
                        np.asarray(action.discrete, dtype=np.int64).ravel().tolist()
                    )

    def _read(self, output: pb.UnityOutputProto) -> list[AgentStep]:
        for brain in output.rl_initialization_output.brain_parameters:
            self._brains[brain.brain_name] = brain
        for cid, payload in side_channels.unframe(output.rl_output.side_channel):
            if cid == side_channels.STATS:
                self.stats.add(payload)
        steps: list[AgentStep] = []
        self._asked = {}
        for behavior, infos in output.rl_output.agentInfos.items():
            if behavior not in self.specs and infos.value:
                if behavior not in self._brains:
                    raise PlayerError(f"agents of behavior '{behavior}' arrived before its specification")
                self.specs[behavior] = _spec(self._brains[behavior], infos.value[0])
            asked = self._asked.setdefault(behavior, [])
            for info in infos.value:  # not empty: then the spec is known (above)
                steps.append(_agent_step(behavior, info, self.specs[behavior]))
                if not info.done:
                    asked.append(info.id)
        return steps

    def wait_for_agents(self, first: list[AgentStep], max_rounds: int = 1000) -> list[AgentStep]:
        """Step with no actions until some agent asks for a decision (ray #33993).

        Terminal steps seen on the way are kept and returned with the rest.
        """
        steps = list(first)
        rounds = 0
        while not any(not s.done for s in steps):
            rounds += 1
            if rounds > max_rounds:
                raise PlayerError(f"no agent asked for a decision in {max_rounds} rounds: {self._where()}")
            steps += self.step()
        return steps


def _keep_earlier(log: Path) -> None:
    """An earlier player's log of the same name (the driver's start-up check, a rollout, an export
    that launched the game again with the same worker id) moved aside to ``Player-N.K.log`` rather
    than overwritten by the player about to start: every player's log is kept."""
    if not log.exists():
        return
    k = 1
    while (aside := log.with_name(f"{log.stem}.{k}{log.suffix}")).exists():
        k += 1
    log.replace(aside)
