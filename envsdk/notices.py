"""One-line notices (renamed keys, adapters applied), each printed once."""

from __future__ import annotations

import logging
import sys
import warnings

from envsdk.internals import RLLIB_API_LOGGERS

_seen: set[str] = set()


def notice(message: str) -> None:
    """Print ``notice: message`` to stderr the first time it is seen."""
    if message in _seen:
        return
    _seen.add(message)
    print(f"notice: {message}", file=sys.stderr, flush=True)


def quiet_rllib() -> None:
    """Keep RLlib's warnings about its own API (stack banners, deprecations) out of our output."""
    for name in RLLIB_API_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # offline runs: a dataset report per read
    # Every Algorithm built in one process re-registers RLlib's env ids with gymnasium.
    warnings.filterwarnings("ignore", message=r".*Overriding environment rllib-")
