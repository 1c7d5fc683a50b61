"""The stand-in player without a display (unity_bridge.standin.player): with graphics on it exits 1
as a Unity player does, and says why and what to do where a person reads it, not only in its log."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers import ROOT


def test_without_a_display_the_stand_in_says_why_it_exits():
    environ = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    done = subprocess.run(
        [sys.executable, "-m", "unity_bridge.standin.player", "--game", "chase"],
        cwd=ROOT,
        env={**environ, "SDL_VIDEODRIVER": "x11"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("stand-in player:")]
    assert "Unable to open display (unset)" in line and "-nographics" in line and "Xvfb" in line
