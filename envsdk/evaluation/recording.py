"""Episode videos: frames from an env's ``rgb_array`` render or its image observations.

:func:`frame_source` decides, before any episode runs, where frames come from
(and refuses envs that offer neither).  :class:`Recorder` collects the frames
of one env instance (one on reset, one per step, so a video has length + 1
frames) and writes one MP4 per episode with OpenCV; :class:`Window` draws
the env's own window instead.  :func:`wrap` feeds either from a single-agent
(gymnasium) or multi-agent (RLlib) env.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.envs.base import OBS_KEY, has_action_mask
from envsdk.envs.spaces import (
    IMAGE,
    MIN_IMAGE_SIDE,
    SpaceError,
    inner_space,
    observation_leaves,
    pick,
    shape_layout,
)
from envsdk.errors import UserError

RENDER = "render"
OBSERVATION = "observation"
HUMAN = "human"
MIN_SIDE = 256  # pixels; smaller frames are scaled up in videos
SUBJECT = "video recording"  # what refuses, in this layer's words; the command line names its flag


def image_path(space: gym.Space) -> tuple | None:
    """Key path to the first part of an observation that can be shown as a picture, or None.

    That is an image as the default CNN reads one (rank 3, channels first or
    last: :func:`~envsdk.envs.spaces.image_layout`) or a rank-2 Box
    of at least 8 pixels a side, shown as grayscale.
    """
    prefix = (OBS_KEY,) if has_action_mask(space) else ()
    try:
        leaves = observation_leaves(inner_space(space))
    except SpaceError:
        return None
    for leaf in leaves:
        shape = getattr(leaf.space, "shape", None) or ()
        flat_picture = isinstance(leaf.space, gym.spaces.Box) and len(shape) == 2
        if leaf.kind == IMAGE or (flat_picture and min(shape) >= MIN_IMAGE_SIDE):
            return (*prefix, *leaf.path)
    return None


def enable_rgb_render(env: Any) -> bool:
    """Switch ``env`` to ``rgb_array`` rendering where it supports it."""
    inner = env.unwrapped
    if getattr(inner, "render_mode", None) == "rgb_array":
        return True
    if "rgb_array" in (getattr(inner, "metadata", None) or {}).get("render_modes", []):
        inner.render_mode = "rgb_array"
        return True
    return False


def frame_source(env: Any, observation_space: gym.Space) -> tuple[str, tuple]:
    """(RENDER, ()) or (OBSERVATION, key path); a UserError when neither exists."""
    if enable_rgb_render(env):
        frame = env.render()
        if isinstance(frame, np.ndarray) and frame.ndim in (2, 3):
            return RENDER, ()
    path = image_path(observation_space)
    if path is not None:
        return OBSERVATION, path
    raise UserError(
        f"{type(env.unwrapped).__name__} has no rgb_array render and no image observation",
        "add render_mode 'rgb_array' support (metadata['render_modes'] and render()) to the env",
        SUBJECT,
    )


def to_bgr(frame: np.ndarray) -> np.ndarray:
    """Any image array -> uint8 HxWx3 BGR for OpenCV; depth/one-channel -> grayscale."""
    import cv2

    img = np.asarray(frame)
    if img.ndim == 3 and shape_layout(img.shape) == "chw":
        img = img.transpose(1, 2, 0)
    if img.ndim == 3 and img.shape[-1] == 1:
        img = img[..., 0]
    if img.dtype != np.uint8:
        img = img.astype(np.float32)
        lo, hi = float(np.nanmin(img)), float(np.nanmax(img))
        if lo >= 0.0 and hi <= 1.0:  # normalised image
            img = img * 255.0
        elif hi > lo:  # depth or other range: stretch to 0..255
            img = (img - lo) * (255.0 / (hi - lo))
        img = np.clip(np.nan_to_num(img), 0, 255).astype(np.uint8)
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    if img.shape[-1] == 4:
        return cv2.cvtColor(img, cv2.COLOR_RGBA2BGR)
    return cv2.cvtColor(img, cv2.COLOR_RGB2BGR)


def write_mp4(path: Path, frames: list[np.ndarray], fps: float) -> Path:
    import cv2

    first = to_bgr(frames[0])
    scale = max(1, MIN_SIDE // min(first.shape[:2]))  # tiny observation images: blow up, blocky
    height, width = first.shape[0] * scale, first.shape[1] * scale
    tmp = path.with_name(f".{path.name}.part.mp4")
    writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter.fourcc(*"mp4v"), fps, (width, height))
    try:
        for frame in frames:
            img = to_bgr(frame)
            if img.shape[:2] != (height, width):
                img = cv2.resize(img, (width, height), interpolation=cv2.INTER_NEAREST)
            writer.write(img)
    finally:
        writer.release()
    tmp.replace(path)
    return path


class Recorder:
    """Frames of one env instance; one MP4 per episode, ``{prefix}_{n:04d}.mp4``."""

    def __init__(self, folder: Path, prefix: str, source: str, path: tuple = (), fps: float = 30.0):
        self.folder = Path(folder)
        self.prefix = prefix
        self.source = source
        self.path = path
        self.fps = fps
        self.frames: list[np.ndarray] = []
        self.count = 0

    def start(self, env: Any, obs: Any) -> None:
        """A reset: write the previous episode (if any) and take the first frame."""
        self.flush()
        self.capture(env, obs)

    def step(self, env: Any, obs: Any, done: bool) -> None:
        self.capture(env, obs)
        if done:
            self.flush()

    def capture(self, env: Any, obs: Any) -> None:
        if self.source == RENDER:
            self.frames.append(np.asarray(env.render()).copy())
        elif obs is not None:
            self.frames.append(np.asarray(pick(obs, self.path)).copy())

    def flush(self) -> None:
        """Write the episode so far (if it has stepped at all) and start a new one."""
        if len(self.frames) > 1:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_mp4(self.folder / f"{self.prefix}_{self.count:04d}.mp4", self.frames, self.fps)
            self.count += 1
        self.frames = []


class Window:
    """The env's own ``human`` rendering, drawn after every reset and step."""

    def start(self, env: Any, obs: Any) -> None:
        env.render()

    def step(self, env: Any, obs: Any, done: bool) -> None:
        env.render()

    def flush(self) -> None:
        pass


Tap = Recorder | Window


class RecordingEnv(gym.Wrapper):
    """Single-agent env feeding every reset and step to a :data:`Tap`."""

    def __init__(self, env: gym.Env, tap: Tap):
        super().__init__(env)
        self.tap = tap

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        obs, info = self.env.reset(**kwargs)
        self.tap.start(self.env, obs)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.tap.step(self.env, obs, terminated or truncated)
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        self.tap.flush()
        super().close()  # type: ignore[no-untyped-call]  # gymnasium's Wrapper.close


def _first(obs: dict) -> Any:
    """Multi-agent frames from observations use the first agent's (None if no agent has one)."""
    return next(iter(obs.values()), None)


class RecordingMultiAgentEnv(MultiAgentEnv):
    """Multi-agent counterpart of :class:`RecordingEnv`."""

    def __init__(self, env: MultiAgentEnv, tap: Tap):
        self.env = env
        self.tap = tap

    # Spaces and agent lists are the wrapped env's, read live.
    observation_spaces = property(lambda self: self.env.observation_spaces, lambda self, v: None)
    action_spaces = property(lambda self: self.env.action_spaces, lambda self, v: None)
    observation_space = property(lambda self: self.env.observation_space, lambda self, v: None)
    action_space = property(lambda self: self.env.action_space, lambda self, v: None)
    agents = property(lambda self: self.env.agents, lambda self, v: None)
    possible_agents = property(lambda self: self.env.possible_agents, lambda self, v: None)
    unwrapped = property(lambda self: self.env.unwrapped)
    metadata = property(lambda self: self.env.metadata)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self.tap.start(self.env, _first(obs))
        return obs, infos

    def step(self, action_dict: dict) -> tuple[dict, dict, dict, dict, dict]:  # type: ignore[override]
        obs, rewards, terminateds, truncateds, infos = self.env.step(action_dict)
        done = bool(terminateds.get("__all__") or truncateds.get("__all__"))
        self.tap.step(self.env, _first(obs), done)
        return obs, rewards, terminateds, truncateds, infos

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.tap.flush()
        self.env.close()


def wrap(env: Any, tap: Tap) -> Any:
    """Wrap a freshly made env (single- or multi-agent) with a frame tap."""
    if isinstance(env, MultiAgentEnv):
        return RecordingMultiAgentEnv(env, tap)
    return RecordingEnv(env, tap)
