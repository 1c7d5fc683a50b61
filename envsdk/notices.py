"""One-line notices (renamed keys, adapters applied), each printed once."""

from __future__ import annotations

import contextlib
import copy
import logging
import re
import sys
import warnings
from collections.abc import Iterator
from typing import Any

from envsdk.internals import RLLIB_API_LOGGERS

_seen: set[str] = set()
_muted: list[bool] = []


def notice(message: str) -> None:
    """Print ``notice: message`` to stderr the first time it is seen (never inside :func:`muted`)."""
    if message in _seen or _muted:
        return
    _seen.add(message)
    print(f"notice: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def muted() -> Iterator[None]:
    """No notices inside: a checkpoint's config built again says nothing that training did not."""
    _muted.append(True)
    try:
        yield
    finally:
        _muted.pop()


class _NoGputilAdvice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "Install gputil" not in record.getMessage()


class _FirstLine(logging.Formatter):
    """Shows an RLlib error as its first line: the run's summary says what failed, and the
    tracebacks are kept (the trial's error.txt, env_runner_errors/)."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        if record.levelno < logging.ERROR:
            return self.inner.format(record)
        lines = record.getMessage().strip().splitlines()
        short = copy.copy(record)
        short.msg, short.args = (lines[0] if lines else ""), ()
        short.exc_info, short.exc_text, short.stack_info = None, None, None
        return self.inner.format(short)


def one_line_rllib_errors() -> None:
    """Give RLlib's console handler the :class:`_FirstLine` format, in every process that calls it
    (other handlers, such as a runner's error file, get the whole record)."""
    for handler in logging.getLogger("ray.rllib").handlers:
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler.formatter, _FirstLine):
            handler.setFormatter(_FirstLine(handler.formatter or logging.Formatter()))


ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain_warning(message: Any) -> str:
    """A warning's text as our notices read: gymnasium's without its colour codes and ``WARN:``."""
    return ANSI.sub("", str(message)).strip().removeprefix("WARN: ")


def gymnasium_warnings_as_notices() -> None:
    """gymnasium's warnings (its env checker's, as RLlib's env runners build envs; gymnasium's
    logger writes them as a coloured ``WARN: ...``) as our notices: each once, without the colour
    codes or the source line that warned."""
    shown = warnings.showwarning
    if getattr(shown, "ours", False):
        return

    def show(message: Any, category: Any, filename: str, lineno: int, *args: Any, **kwargs: Any) -> None:
        if ANSI.sub("", str(message)).startswith("WARN: "):  # gymnasium.logger.warn's form
            notice(f"gymnasium: {plain_warning(message)}")
            return
        shown(message, category, filename, lineno, *args, **kwargs)

    show.ours = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def quiet_rllib() -> None:
    """Keep RLlib's warnings about its own API (stack banners, deprecations) out of our output,
    gymnasium's warnings to our notices, and RLlib's errors to one line (:func:`one_line_rllib_errors`)."""
    one_line_rllib_errors()
    gymnasium_warnings_as_notices()
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
