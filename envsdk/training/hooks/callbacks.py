"""Adding this tool's hooks to an AlgorithmConfig without replacing the user's.

RLlib keeps one ``callbacks_on_<event>`` setting per event, a callable or a
list of them, called in order.  :func:`add_callback` appends to it, so a
user's own ``callbacks_on_train_result`` (or one of another hook of ours:
curriculum, Unity stats, ``--restore``, failure checks) keeps running.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from ray.rllib.callbacks.callbacks import RLlibCallback

F = TypeVar("F", bound=Callable[..., Any])


def hook_list(value: Any) -> list[Any]:
    """A callbacks setting as a list: RLlib takes None, one callable (or class), or a list of them."""
    return [] if value is None else list(value) if isinstance(value, list | tuple) else [value]


def add_callback(config: Any, event: str, hook: Callable[..., Any], *, first: bool = False) -> None:
    """Call ``hook`` on ``event`` (e.g. ``"on_train_result"``) after the hooks set, or first if ``first``."""
    hooks = hook_list(getattr(config, f"callbacks_{event}", None))
    config.callbacks(**{event: [hook, *hooks] if first else [*hooks, hook]})


def add_callback_class(config: Any, cls: type[RLlibCallback]) -> None:
    """Add ``cls`` to the config's callbacks classes, keeping a user's (RLlib takes a list).  Both API
    stacks take classes; the old one takes no callback functions."""
    users = [c for c in hook_list(config.callbacks_class) if c is not RLlibCallback]
    config.callbacks(callbacks_class=[*users, cls] if users else cls)


READS_THE_EPISODE_ONLY = "reads_the_episode_only"


def reads_the_episode_only(hook: F) -> F:
    """Mark one of our episode callbacks as one the batched sampler
    (training/substitutes/sampling/batched_runner.py) may call after the sample: it reads its
    episode (or arms a connector), never the env's state."""
    setattr(hook, READS_THE_EPISODE_ONLY, True)
    return hook
