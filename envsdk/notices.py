"""One-line notices (renamed keys, adapters applied), each printed once."""

from __future__ import annotations

import sys

_seen: set[str] = set()


def notice(message: str) -> None:
    """Print ``notice: message`` to stderr the first time it is seen."""
    if message in _seen:
        return
    _seen.add(message)
    print(f"notice: {message}", file=sys.stderr, flush=True)
