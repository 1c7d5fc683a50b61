"""What can go wrong with a player, as exceptions the env and train.py can name.

This package imports nothing from envsdk; envsdk tells the two kinds apart by a class attribute
(``envsdk.errors``): a ``user_mistake`` is a setting or a file to fix (train.py: exit 2, one or
two lines, before training), and a failure that is ``reported_whole`` says in its own message
what happened, however deep in a chain of re-raised errors it arrives.
"""

from __future__ import annotations


class SettingsError(ValueError):
    """A Unity setting or file the user can fix: the message, and a hint that says how."""

    user_mistake = True

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


class LaunchError(SettingsError):
    """The player could not be started at all (a user-fixable problem)."""


class PlayerError(RuntimeError):
    """A player failed during training (crash, hang, early shutdown); the outermost one of a
    chain is reported (it says what was tried after the first)."""

    reported_whole = True


class PlayerClosed(PlayerError):
    """The player process exited or announced its shutdown."""


class PlayerTimeout(PlayerError):
    """The player did not answer within ``timeout_wait``."""


class VersionMismatch(PlayerError):
    """The player speaks an incompatible protocol version."""


class ProtocolError(RuntimeError):
    """The player sent what the protocol does not allow: a side channel or an image cut short.

    Not a :class:`PlayerError`: a player that breaks the protocol is not restarted, as it would
    break it again; the run ends with this message."""

    reported_whole = True
