"""Speed-ups of Ray, RLlib and torch that envsdk installs on its own training path, in the open.

Importing envsdk changes no third-party object.  :func:`install` puts these in place; train.py
and rollout.py call it once, and the ``on_environment_created`` hook (:func:`on_env_runner`) calls
it in every process that builds an env runner (remote env runners, a Tune trial's process), which
happens before that process builds its connectors and learners.  They are the ``patch`` entries
of :mod:`envsdk.substitutions`' table, switched off as the others are (``ENVSDK_STOCK``,
``stock:``, and the older ``ENVSDK_NO_PATCHES=1`` or ``=fused-adam,polyak-in-place``);
``benchmarks/speedups.py`` measures what each one buys.  Each is in :mod:`envsdk.internals`
with the test of its assumption.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from envsdk import internals
from envsdk.substitutions import off_in_environment

SPEEDUPS: dict[str, tuple[Callable[[], None], str]] = {
    "connector-frames": (
        internals.connectors_find_their_caller_cheaply,
        "connector pieces find their caller's frame without reading every frame's source",
    ),
    "polyak-in-place": (
        internals.polyak_updates_in_place,
        "target networks (DQN, SAC, APPO) blended in place",
    ),
    "fused-adam": (
        internals.optimizers_fused_on_cpu,
        "RLlib's default Adam optimizers stepped by torch's fused kernel on CPU",
    ),
    "finite-check-once": (
        internals.gradients_checked_once,
        "a learner's gradients tested for nan/inf by one sum, not twice tensor by tensor",
    ),
    "episodes-converted-once": (
        internals.convert_done_episodes_once,
        "multi-agent episodes that ended are converted to numpy once, not again at every step",
    ),
}


def wanted(off: set[str] | None = None) -> list[str]:
    """The speed-ups left on when ``off`` (default: what the environment turns off) are off."""
    skipped = off_in_environment() if off is None else off
    return [name for name in SPEEDUPS if name not in skipped]


def install(off: set[str] | None = None) -> list[str]:
    """Install the wanted speed-ups in this process (idempotent); returns their names."""
    names = wanted(off)
    for name in names:
        SPEEDUPS[name][0]()
    return names


def on_env_runner(*, off: tuple[str, ...] | list[str] = (), **_: Any) -> None:
    """``on_environment_created`` hook: :func:`install` in the env runner's process, but for the
    patches the environment or the experiment's ``stock:`` (``off``) turns off."""
    install(off_in_environment() | set(off))


@contextmanager
def untracked_imports() -> Iterator[None]:
    """No garbage collection while the block imports RLlib, and what it left frozen after.

    Importing RLlib (torch, Ray, Tune) allocates about half a million objects, kept for the life
    of the process: the collector runs hundreds of times during the import and frees nothing,
    then every full collection of a training run walks them again.  train.py and rollout.py
    import under this; turning off ``frozen-imports`` (envsdk/substitutions.py) leaves it alone.
    """
    if "frozen-imports" in off_in_environment():
        yield
        return
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        if collecting:
            gc.enable()
