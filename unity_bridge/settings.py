"""``env_config`` keys of the Unity env: defaults, types and checks, in one place."""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from unity_bridge.errors import SettingsError
from unity_bridge.player import PLAYER_PATH_ENV, find_executable
from unity_bridge.samplers import Sampler, parse_parameter

# Env runners x their games get distinct port offsets: worker_id = worker_index * stride + slot.
PORT_STRIDE = 32

# How a policy's continuous actions are brought into [-1, 1], the range ML-Agents' trainers send and
# games are written for (Unity passes them on as received).  RLlib trains on the unclipped sample.
MLAGENTS, CLIP, AUTO = "mlagents", "clip", "auto"
CONTINUOUS_ACTIONS = {
    MLAGENTS: "clamp(a, -3, 3) / 3, as mlagents-learn sends a Gaussian policy's sample",
    CLIP: "clip(a, -1, 1), as RLlib's clip_actions (a squashed policy's actions are already inside)",
    AUTO: f"'{CLIP}' for algorithms whose policies squash their actions (SAC, CQL), else '{MLAGENTS}'",
}
SQUASHING_ALGORITHMS = frozenset({"SAC", "CQL"})


def continuous_mapping(setting: str, algorithm: str) -> str:
    """The mapping ``setting`` means for a policy trained by ``algorithm`` (``auto`` resolved)."""
    if setting != AUTO:
        return setting
    return CLIP if algorithm.upper() in SQUASHING_ALGORITHMS else MLAGENTS


def to_unity_range(values: Any, mapping: str) -> Any:
    """Continuous actions (a numpy array or a torch tensor) in [-1, 1] by ``mapping``."""
    return values.clip(-3.0, 3.0) / 3.0 if mapping == MLAGENTS else values.clip(-1.0, 1.0)


# The numeric keys of LaunchSettings, with the type each takes (an integral float passes as an int).
_NUMBERS: dict[str, type] = {
    "time_scale": float, "width": int, "height": int, "quality_level": int,
    "target_frame_rate": int, "capture_frame_rate": int, "timeout_wait": float, "base_port": int,
    "port_range": int, "seed": int, "num_areas": int, "max_restarts": int,
    "max_restarts_per_minute": int,
}  # fmt: skip


@dataclass(frozen=True)
class LaunchSettings:
    """How to start and drive one player (see docs/unity.md for each key)."""

    file_name: str | None = None  # None: connect to the Unity Editor (port 5004), press Play
    no_graphics: bool = False
    no_graphics_monitor: bool = False  # the first env renders, every other one runs with no_graphics
    virtual_display: str = "auto"  # auto | on | off
    log_folder: str | None = None
    time_scale: float = 20.0
    width: int = 84
    height: int = 84
    quality_level: int = 1
    target_frame_rate: int = -1
    capture_frame_rate: int = 60
    # name -> a number or an mlagents-learn sampler mapping (unity_bridge.samplers), parsed by _check
    env_parameters: dict[str, float | Sampler] = field(default_factory=dict)
    # name -> [[timesteps, value], ...]; applied with `curriculum: unity_bridge.schedule.parameter_schedule`
    parameter_schedule: dict[str, list[list[float]]] = field(default_factory=dict)
    additional_args: list[str] = field(default_factory=list)
    timeout_wait: float = 60.0
    base_port: int = 5005
    port_range: int = 1000
    seed: int = 0
    num_areas: int = 1
    max_restarts: int = 5  # player restarts over the env's lifetime
    max_restarts_per_minute: int = 3
    episode_horizon: int | None = 1000  # RLlib steps before every live agent is truncated; null = none
    policy_mapping: dict[str, str] = field(default_factory=dict)  # behavior name -> policy id
    continuous_actions: str = AUTO  # CONTINUOUS_ACTIONS: into [-1, 1] before they are sent
    display: str | None = field(default=None, repr=False)  # $DISPLAY at start-up, not a YAML key

    @classmethod
    def from_config(cls, env_config: dict[str, Any]) -> LaunchSettings:
        names = {f.name for f in fields(cls) if f.name != "display"}
        values: dict[str, Any] = {}
        for key, value in dict(env_config).items():
            if key not in names:
                raise SettingsError(
                    f"env_config: unknown Unity setting '{key}'",
                    _nearest(key, sorted(names)) or f"valid keys: {', '.join(sorted(names))}",
                )
            values[key] = value
        try:
            settings = cls(**values, display=os.environ.get("DISPLAY"))
            settings._check()
        except SettingsError as err:  # says its own fix
            raise SettingsError(f"env_config: {err.message}", err.hint) from err
        except (TypeError, ValueError) as err:
            raise SettingsError(f"env_config: {err}", "see docs/unity.md for each key") from err
        return settings

    def _check(self) -> None:
        """ValueErrors for values of the wrong type or range, in the order of these steps."""
        self._check_numbers()
        self._check_collections()
        self._check_rllib_keys()

    def _check_numbers(self) -> None:
        """The numeric keys: integers or numbers (not booleans), a port number, a positive timeout."""
        for name, kind in _NUMBERS.items():
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or (kind is int and value != int(value))
            ):
                raise ValueError(
                    f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}"
                )
        if not 1 <= self.base_port <= 65535:
            raise ValueError(f"base_port {self.base_port} is not a port number")
        if self.timeout_wait <= 0:
            raise ValueError("timeout_wait must be > 0 seconds")

    def _check_collections(self) -> None:
        """The list and mapping keys sent to the player: its arguments and environment parameters."""
        if not isinstance(self.additional_args, list):
            raise ValueError("additional_args must be a list of strings, e.g. [-screen-fullscreen, 0]")
        if not isinstance(self.env_parameters, dict) or not all(
            isinstance(k, str) for k in self.env_parameters
        ):
            raise ValueError("env_parameters must map names to numbers or samplers, e.g. {difficulty: 0.5}")
        parsed = {k: parse_parameter(v, f"env_parameters.{k}") for k, v in self.env_parameters.items()}
        object.__setattr__(self, "env_parameters", parsed)  # frozen: the parsed form replaces the YAML's
        for name, points in dict(self.parameter_schedule).items():
            if (
                not isinstance(points, list)
                or not points
                or not all(isinstance(p, list | tuple) and len(p) == 2 for p in points)
            ):
                raise ValueError(f"parameter_schedule.{name} must be a list of [timesteps, value] pairs")

    def _check_rllib_keys(self) -> None:
        """The keys the RLlib env reads rather than the player: the action mapping, the horizon."""
        if self.continuous_actions not in CONTINUOUS_ACTIONS:
            choices = ", ".join(f"{k} ({v})" for k, v in CONTINUOUS_ACTIONS.items())
            raise ValueError(f"continuous_actions must be one of: {choices}; got {self.continuous_actions!r}")
        if self.episode_horizon is not None and (
            not isinstance(self.episode_horizon, int) or self.episode_horizon < 1
        ):
            raise ValueError("episode_horizon must be a positive integer or null")

    def for_worker(self, worker_index: int, slot: int) -> tuple[LaunchSettings, int]:
        """This env's settings and worker id (distinct ports; graphics for the monitor only)."""
        worker_id = worker_index * PORT_STRIDE + slot
        if self.no_graphics_monitor:
            monitor = worker_index <= 1 and slot == 0
            return replace(self, no_graphics=not monitor), worker_id
        return self, worker_id

    def resolved_paths(self, base: Path) -> dict[str, Any]:
        """file_name and log_folder (cwd) made absolute for the env runners.

        file_name is looked up next to the YAML, in the working directory, then in the folders of
        ``$ENVSDK_PLAYER_PATH`` (``:``-separated; where a team keeps its builds).  A player that
        cannot be found (or run) is a LaunchError here, before anything starts.
        """
        out: dict[str, Any] = {}
        if self.file_name is not None:
            extra = [Path(p) for p in os.environ.get(PLAYER_PATH_ENV, "").split(os.pathsep) if p]
            out["file_name"] = str(find_executable(self.file_name, [base, Path.cwd(), *extra]))
        if self.log_folder is not None and not Path(self.log_folder).expanduser().is_absolute():
            out["log_folder"] = str(Path(self.log_folder).expanduser().resolve())  # relative to the cwd
        return out


def _nearest(name: str, names: list[str]) -> str:
    """'did you mean ...?' for a misspelt setting, or nothing."""
    close = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    return f"did you mean {', '.join(repr(n) for n in close)}?" if close else ""
