"""Speed-ups of Ray, RLlib and torch that envsdk installs on its own training path, in the open.

Importing envsdk changes no third-party object.  :func:`install` puts these in place; train.py
and rollout.py call it once, and the ``on_environment_created`` hook (:func:`on_env_runner`) calls
it in every process that builds an env runner (remote env runners, a Tune trial's process), which
happens before that process builds its connectors and learners.  They are the ``patch`` entries
of :mod:`envsdk.substitutions`' table, each row with its install function, and every function
here takes a switch (:class:`envsdk.substitutions.Stock`: ``ENVSDK_STOCK``, ``stock:``,
and the older ``ENVSDK_NO_PATCHES=1`` or ``=fused-adam,polyak-in-place``);
``benchmarks/speedups.py`` measures what each one buys.  Each is in :mod:`envsdk.internals`
with the test of its assumption.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from envsdk.substitutions import FROZEN_IMPORTS, TABLE, Stock

# The patches installed by a call: each ``patch`` row of the table with its install function.
SPEEDUPS: dict[str, Callable[[], None]] = {s.name: s.install for s in TABLE.values() if s.install is not None}


def wanted(stock: Stock) -> list[str]:
    """The speed-ups ``stock`` leaves on."""
    return [name for name in SPEEDUPS if stock.on(name)]


# What the command this process runs (train.py, rollout.py) turned off, for the whole process: an
# experiment's ``on_environment_created`` hook in this process adds to it and never undoes it.
_command_off: frozenset[str] = frozenset()


def install_for_command(stock: Stock) -> list[str]:
    """:func:`install` with the command's switch, which every later hook in this process keeps."""
    global _command_off
    _command_off = stock.off
    return install(stock)


def install(stock: Stock) -> list[str]:
    """Install the speed-ups ``stock`` leaves on in this process (idempotent); returns their names.

    With ``frozen-imports`` off, what :func:`untracked_imports` froze goes back to the collector:
    rollout.py imports RLlib before it has read the checkpoint's ``stock:``."""
    names = wanted(stock)
    for name in names:
        SPEEDUPS[name]()
    if not stock.on(FROZEN_IMPORTS):
        gc.unfreeze()
    return names


def on_env_runner(*, off: tuple[str, ...] | list[str] = (), **_: Any) -> None:
    """``on_environment_created`` hook: :func:`install` in the env runner's process, but for the
    patches the environment, the experiment's ``stock:`` (``off``) or, in the command's own process,
    the command's switch turn off (one experiment of a file leaves another's stock run alone)."""
    install(Stock(Stock.resolve().off | frozenset(off) | _command_off))


@contextmanager
def untracked_imports(stock: Stock) -> Iterator[None]:
    """No garbage collection while the block imports RLlib, and what it left frozen after.

    Importing RLlib (torch, Ray, Tune) allocates about half a million objects, kept for the life
    of the process: the collector runs hundreds of times during the import and frees nothing,
    then every full collection of a training run walks them again.  train.py and rollout.py
    import under this; a ``stock`` that turns off ``frozen-imports`` (envsdk/substitutions.py)
    leaves the collector alone.
    """
    if not stock.on(FROZEN_IMPORTS):
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
