"""gymnasium's warnings as our notices (envsdk.notices.gymnasium_warnings_as_notices): each once,
without gymnasium's colour codes, its ``WARN:`` or the source line that warned."""

from __future__ import annotations

import warnings

from gymnasium import logger

from envsdk.notices import gymnasium_warnings_as_notices


def test_gymnasium_warnings_are_notices_once_without_colour_codes(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        gymnasium_warnings_as_notices()
        for _ in range(3):
            logger.warn("The obs returned by the `reset()` method is not within the observation space.")
    said = capsys.readouterr().err
    assert said.count("notice: gymnasium: The obs returned by the `reset()` method is not within") == 1
    assert "\x1b[" not in said and "WARN:" not in said and "logger.warn(" not in said
