"""What can go wrong with a player, as exceptions the env and train.py can name."""

from __future__ import annotations

from envsdk.errors import RunFault, UserError


class PlayerError(RunFault):
    """A player failed during training (crash, hang, early shutdown); the outermost one of a
    chain is reported (it says what was tried after the first)."""


class PlayerClosed(PlayerError):
    """The player process exited or announced its shutdown."""


class PlayerTimeout(PlayerError):
    """The player did not answer within ``timeout_wait``."""


class VersionMismatch(PlayerError):
    """The player speaks an incompatible protocol version."""


class LaunchError(UserError):
    """The player could not be started at all (a user-fixable problem)."""
