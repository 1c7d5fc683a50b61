"""Deciding whether a player needs a virtual X display, and starting one.

``virtual_display``: ``auto`` starts Xvfb (through pyvirtualdisplay) when the
player renders (no ``no_graphics``) and $DISPLAY does not lead to a live X
server; ``on`` always starts one; ``off`` never does.
"""

from __future__ import annotations

import os
import shutil
import socket
from typing import Any

from unity_bridge.errors import LaunchError

MODES = ("auto", "on", "off")


def display_usable(display: str | None) -> bool:
    """Whether an X server answers at ``display`` (":N", "unix:N" or "host:N")."""
    if not display or ":" not in display:
        return False
    host, _, rest = display.rpartition(":")
    try:
        number = int(rest.split(".")[0])
    except ValueError:
        return False
    try:
        if host in ("", "unix"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(1.0)
                sock.connect(f"/tmp/.X11-unix/X{number}")
        else:
            socket.create_connection((host, 6000 + number), timeout=1.0).close()
    except OSError:
        return False
    return True


def needs_virtual_display(mode: str, no_graphics: bool, display: str | None) -> bool:
    if mode not in MODES:
        raise LaunchError(
            f"env_config virtual_display: {mode!r} is not one of {', '.join(MODES)}",
            "write virtual_display: auto (the default), on or off",
        )
    if mode == "on":
        return True
    if mode == "off" or no_graphics:
        return False
    return not display_usable(display)


class VirtualDisplay:
    """An Xvfb server of our own, for one player."""

    def __init__(self, width: int, height: int):
        if shutil.which("Xvfb") is None:
            raise LaunchError(
                "the player needs an X display and none is usable, but Xvfb is not installed",
                "install it (Debian: apt-get install xvfb), or set no_graphics: true",
            )
        from pyvirtualdisplay.display import Display

        size = (max(width, 640), max(height, 480))
        self._display: Any = Display(visible=False, size=size, color_depth=24, manage_global_env=False)
        self._display.start()

    @property
    def name(self) -> str:
        return f":{self._display.display}"

    @property
    def pid(self) -> int:
        return int(self._display.pid)

    def stop(self) -> None:
        if self._display.is_alive():
            self._display.stop()


def child_environment(display: str | None) -> dict[str, str]:
    """The player's environment: ours, on ``display``, without our SDL settings.

    A Unity player draws through SDL, like the pygame that renders gymnasium
    envs here; rollout.py points pygame at SDL's dummy video driver, which a
    player inheriting it would render its cameras with (blank, or not at all).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("SDL_")}
    if display:
        env["DISPLAY"] = display
    return env
