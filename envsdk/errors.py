"""User-facing errors and the one place that turns them into exit status 2.

A ``UserError`` is a mistake the user can fix (bad YAML, unknown key, an env
that cannot be imported).  Entry points run under :func:`run_cli`, which prints
the message and hint on one or two lines and exits with status 2; ``--debug``
re-raises so the full traceback is visible.
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager

from envsdk.internals import run_exit_hooks

EXIT_USAGE = 2


class UserError(Exception):
    """A mistake in the user's input, reported without a traceback.

    ``subject`` names what refused, in the words of the layer that raised it ("ONNX export"); the
    command line says it again :meth:`under` the flag or command the user typed.
    """

    def __init__(self, message: str, hint: str | None = None, subject: str | None = None):
        self.problem = message
        self.subject = subject
        self.message = f"{subject}: {message}" if subject else message
        self.hint = hint
        super().__init__(self.message)

    def under(self, subject: str) -> UserError:
        """The same mistake with ``subject`` (say ``--export-unity``) in place of the raiser's."""
        return UserError(self.problem, self.hint, subject)

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  fix: {self.hint}"


@contextmanager
def said_under(flags: str | Mapping[str, str]) -> Iterator[None]:
    """The command line's words for a lower layer's refusal: a :class:`UserError` raised inside is
    raised again :meth:`~UserError.under` the flag the user typed.  ``flags``: that flag, for every
    refusal inside; or the flag each subject stands for, other refusals passing as they are."""
    try:
        yield
    except UserError as err:
        flag = flags if isinstance(flags, str) else flags.get(err.subject or "")
        if flag is None:
            raise
        raise err.under(flag) from err


class RunFault(RuntimeError):
    """A fault found while training (an env's, a policy's) whose message names it and its fix;
    reported as it is, however deep in a chain of re-raised errors it arrives."""

    reported_whole = True


def reports_whole(err: BaseException | None) -> bool:
    """A :class:`RunFault`, or another package's exception that says it is one: a class attribute
    ``reported_whole`` (unity_bridge's player errors; it imports nothing from envsdk)."""
    return bool(getattr(type(err), "reported_whole", False))


def as_user_error(err: BaseException) -> UserError | None:
    """``err`` as a :class:`UserError` when it is one, or another package's exception that says it
    is a user's mistake: a class attribute ``user_mistake``, with ``message`` and ``hint``."""
    if isinstance(err, UserError):
        return err
    if getattr(type(err), "user_mistake", False):
        return UserError(str(getattr(err, "message", err)), getattr(err, "hint", None))
    return None


def raise_if_user_error(err: Exception) -> None:
    """Re-raise ``err`` if it is a user's mistake (as a :class:`UserError` when it is another
    package's); return if it is not, for the caller to report it as it reports faults."""
    user = as_user_error(err)
    if user is err:
        raise err
    if user is not None:
        raise user from err


def root_cause(err: BaseException) -> BaseException:
    """The error to report from a chain (RLlib re-raises env errors as a bare ``RuntimeError
    from e``): the first one reported whole (:class:`RunFault`), else the first of the chain."""
    while not reports_whole(err):
        following = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
        if following is None:
            break
        err = following
    return err


def held_cause(err: BaseException) -> BaseException:
    """:func:`root_cause`, through Ray's actor errors (``RayTaskError``), each of which holds the
    remote error (``cause``) pickled, without its own chain."""
    root = root_cause(err)
    while isinstance(getattr(root, "cause", None), BaseException):
        root = root_cause(root.cause)  # type: ignore[attr-defined]
    return root


# An exception's line in a traceback's text: its class's dotted path, and the message's first line
_RAISED = re.compile(r"^([A-Za-z_][\w.]*\.)?([A-Za-z_]\w*): (.+)$")


def one_line(err: BaseException) -> str:
    """``err`` in one line, ``Name: message``, as a run's summary reports it, by :func:`root_cause`'s
    rule: the outermost fault of the chain that reports itself whole, else the chain's innermost
    error.  Ray's actor errors (``RayTaskError``: a trial that ran in Tune's actor, a remote runner
    under it) hold the remote error pickled, without its chain; their text (the remote traceback)
    still has it, and is read by the same rule."""
    root = held_cause(err)
    if reports_whole(root):
        return _said(root)
    remote = root is not root_cause(err)  # err is a Ray actor's error: its text is a traceback
    text = str(err) if remote or not str(root).strip() else ""
    raised = [m for m in map(_RAISED.match, text.splitlines()) if m is not None]
    for module, name, message in (m.groups() for m in reversed(raised)):  # the outermost first
        if module and module.startswith(("envsdk.", "unity_bridge.")) and _whole_by_name(module[:-1], name):
            return f"{name}: {message}"
    if raised:  # the traceback's first exception: the chain's innermost
        return f"{raised[0].group(2)}: {raised[0].group(3)}"
    return _said(root)


def _said(err: BaseException) -> str:
    """A fault reported whole on one line; another error by its message's last line (a traceback's
    text ends with its exception)."""
    if reports_whole(err):
        return f"{type(err).__name__}: {' '.join(str(err).split())}"
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[-1] if lines else ''}"


def _whole_by_name(module: str, name: str) -> bool:
    """Whether envsdk's or unity_bridge's class ``module.name`` reports itself whole."""
    try:
        found = getattr(sys.modules.get(module) or importlib.import_module(module), name, None)
    except Exception:  # a module that cannot be imported here names no fault of ours
        return False
    return isinstance(found, type) and bool(getattr(found, "reported_whole", False))


def closest(name: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The valid names closest to a misspelt one (for 'did you mean' hints)."""
    return difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.6)


def did_you_mean(name: str, candidates: Iterable[str]) -> str:
    matches = closest(name, candidates)
    return f"did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""


def run_cli(main: Callable[[list[str]], int | None], argv: list[str] | None = None) -> int:
    """Run an entry point; a UserError becomes a short message and exit 2."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        return int(main(argv) or 0)
    except Exception as err:
        user = as_user_error(err)
        fault = root_cause(err)
        held = held_cause(err)  # a Ray actor's error (rollout.py --num-workers) holds it
        fault = held if reports_whole(held) else fault
        if user is None and reports_whole(fault) and not debug:
            # A fault that names itself and its fix (an env's, a policy's: rollout.py plays them),
            # however deep in RLlib's re-raises: its line, not the traceback.
            what, _, fix = str(fault).partition("; fix: ")
            print(f"error: {what}" + (f"\n  fix: {fix}" if fix else ""), file=sys.stderr)
            sys.unraisablehook = lambda _unraisable: None
            return 1
        if user is None or debug:
            raise
        print(f"error: {user}", file=sys.stderr)
        # Said; what is collected from here on (RLlib's half-built vector env, whose __del__ fails
        # on the envs it never made) would only print a traceback after the answer.
        sys.unraisablehook = lambda _unraisable: None
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def exit_now(code: int) -> None:
    """End the process once ``code`` is known, skipping the interpreter's teardown.

    After RLlib and torch are loaded, Python's own finalisation (modules and
    objects, one by one) takes about a second and does nothing for us: Ray is
    shut down and every file we wrote is closed.  The exit hooks still run
    (logging, Ray's own), then the process ends.
    """
    run_exit_hooks()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
