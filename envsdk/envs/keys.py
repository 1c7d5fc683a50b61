"""The observation keys of an action-masked env, shared by the base classes and the default models."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

OBS_KEY = "observations"
MASK_KEY = "action_mask"


def has_action_mask(space: Any) -> bool:
    """Whether observations of ``space`` are ``{"observations": ..., "action_mask": ...}``."""
    return isinstance(space, gym.spaces.Dict) and MASK_KEY in space.spaces and OBS_KEY in space.spaces
