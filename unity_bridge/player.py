"""Starting and ending one Unity player process.

The command line is the one mlagents-envs builds: ``-nographics -batchmode``
when graphics are off, ``--mlagents-port PORT``, ``-logFile PATH`` when a log
folder is set (else ``-logFile -`` is not passed and Unity writes its usual
per-user log), then the user's ``additional_args``.  The player runs in its
own session so that ending it ends every process it started.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from unity_bridge.errors import LaunchError

SUFFIXES = (".app", ".exe", ".x86_64", ".x86")


PLAYER_PATH_ENV = "ENVSDK_PLAYER_PATH"  # more folders to look for players in (``:``-separated)


def find_executable(file_name: str, search: list[Path]) -> Path:
    """The player binary for ``file_name`` (with or without its .x86_64 suffix)."""
    raw = Path(file_name).expanduser()
    stem = raw
    for suffix in SUFFIXES:
        if raw.name.endswith(suffix):
            stem = raw.with_name(raw.name[: -len(suffix)])
            break
    bases = [raw] if raw.is_absolute() else [base / raw for base in search] + [raw]
    stems = [stem] if stem.is_absolute() else [base / stem for base in search] + [stem]
    candidates = [s.with_name(s.name + ext) for s in stems for ext in (".x86_64", ".x86")] + bases
    for candidate in candidates:
        if candidate.is_file():
            if not os.access(candidate, os.X_OK):
                raise LaunchError(
                    f"Unity player {candidate} is not executable",
                    f"chmod +x {candidate}",
                )
            return candidate.resolve()
    looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
    fix = (
        "set env_config file_name to the built player (the .x86_64 file), relative to the YAML, or put"
        f" its folder on ${PLAYER_PATH_ENV} (this project's stand-in players: python -m"
        f" unity_bridge.standin build {stem.parent})"
    )
    raise LaunchError(f"Unity player '{file_name}' not found (looked for {looked})", fix)


def command_line(
    executable: Path, *, port: int, no_graphics: bool, log_file: Path | None, additional_args: list[str]
) -> list[str]:
    args = [str(executable)]
    if no_graphics:
        args += ["-nographics", "-batchmode"]
    args += ["--mlagents-port", str(port)]
    if log_file is not None and not any(a.lower() == "-logfile" for a in additional_args):
        args += ["-logFile", str(log_file)]
    return args + [str(a) for a in additional_args]


@dataclass
class ProcessStats:
    threads: int
    rss_mb: float


class PlayerProcess:
    """One running player, plus the watchdog that ends it if we die first."""

    def __init__(self, args: list[str], env: dict[str, str], extra_pids: list[int]):
        self.args = args
        try:
            self._proc = subprocess.Popen(
                args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        except OSError as err:
            raise LaunchError(
                f"Unity player {args[0]} could not be started: {err.strerror}",
                "check that file_name points at a Linux player build for this machine",
            ) from err
        watch = ["--group", str(self._proc.pid)] + [a for pid in extra_pids for a in ("--pid", str(pid))]
        self._reaper = subprocess.Popen(
            [sys.executable, "-m", "unity_bridge.reaper", str(os.getpid()), *watch],
            stdin=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    @property
    def pid(self) -> int:
        return self._proc.pid

    def alive(self) -> bool:
        return self._proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._proc.poll()

    def stats(self) -> ProcessStats | None:
        """Thread count and resident memory of the player, from /proc (Linux)."""
        try:
            status = Path(f"/proc/{self._proc.pid}/status").read_text()
        except OSError:
            return None
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss_kb = int(fields.get("VmRSS", "0 kB").split()[0])
        return ProcessStats(threads=int(fields.get("Threads", "0")), rss_mb=rss_kb / 1024)

    def stop(self, grace: float = 3.0, exit_wait: float = 0.0) -> None:
        """End the player's whole process group: SIGTERM, then SIGKILL after ``grace`` s.

        ``exit_wait``: a player that was told to quit gets this long to exit on
        its own first (and to finish its log), as mlagents-envs allows.
        """
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=exit_wait)
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self._proc.pid, sig)
            try:
                self._proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self._reaper.kill()
        self._reaper.wait()


def thread_limit() -> int | None:
    """This user's process/thread limit (RLIMIT_NPROC), if there is one."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    return None if soft == resource.RLIM_INFINITY else soft
