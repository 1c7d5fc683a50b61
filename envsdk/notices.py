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


class _NoGputilAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Install gputil" not in record.getMessage()


def quiet_rllib() -> None:
    """Keep RLlib's warnings about its own API (stack banners, deprecations) out of our output."""
    for name in RLLIB_API_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    logging.getLogger("ray.data").setLevel(logging.WARNING)  # offline runs: a dataset report per read
    # Every Algorithm's utilization monitor asks for GPUtil, a package RLlib does not install; the
    # perf/ metrics (CPU, RAM) come without it.
    monitor = logging.getLogger("ray.tune.utils.util")
    if not any(isinstance(f, _NoGputilAdvice) for f in monitor.filters):
        monitor.addFilter(_NoGputilAdvice())
    # Every Algorithm built in one process re-registers RLlib's env ids with gymnasium.
    warnings.filterwarnings("ignore", message=r".*Overriding environment rllib-")
