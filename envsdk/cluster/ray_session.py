"""Starting or joining Ray for a training run."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
from pathlib import Path
from typing import Any

from envsdk import internals
from envsdk.errors import UserError
from envsdk.notices import notice
from envsdk.substitutions import NO_PATCHES, STOCK

SUBJECT = "joining Ray"  # what refuses, in this layer's words; the command line names its flag


def workers_env_vars(pythonpath: str) -> dict[str, str]:
    """What a joined cluster's workers get from this driver: its paths, and its choice of
    substitutions (envsdk.substitutions: ENVSDK_STOCK, ENVSDK_NO_PATCHES)."""
    env_vars = {"PYTHONPATH": pythonpath} if pythonpath else {}
    for switch in (STOCK, NO_PATCHES):
        if os.environ.get(switch):
            env_vars[switch] = os.environ[switch]
    return env_vars


def start_ray(
    address: str | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    object_store_memory: int | None = None,
    temp_dir: str | None = None,
    code_paths: list[Path] | None = None,
) -> None:
    """Join the cluster at ``address`` ('auto' reads RAY_ADDRESS) or start a local Ray.

    ``code_paths`` go on the workers' PYTHONPATH so env and model modules
    next to the YAML file import there too.
    """
    import ray

    if ray.is_initialized():
        return
    paths = [str(p) for p in (code_paths or [])]
    existing = os.environ.get("PYTHONPATH")
    pythonpath = os.pathsep.join(paths + ([existing] if existing else []))
    # Tune's own console table and Ray's INFO/WARNING chatter from workers would
    # drown the progress line; warnings that matter are raised as errors.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    kwargs: dict = {
        "logging_level": logging.ERROR,
        "logging_config": ray.LoggingConfig(log_level="ERROR"),
        "include_dashboard": False,
    }
    if address:
        # A cluster's workers were started without our paths: they come with a runtime env.
        env_vars = workers_env_vars(pythonpath)
        kwargs["runtime_env"] = {"env_vars": env_vars} if env_vars else None
        if address == "auto" and not os.environ.get("RAY_ADDRESS"):
            raise UserError(
                "the address is 'auto', but RAY_ADDRESS is not set", "give the head's host:port", SUBJECT
            )
        kwargs["address"] = address
    else:
        # A local Ray's workers inherit the raylet's environment, so the paths go there. A
        # runtime env would keep Ray from using the workers it starts ahead (each Tune trial
        # and remote env runner would wait for a fresh one).
        if pythonpath:
            os.environ["PYTHONPATH"] = pythonpath
        kwargs.update(
            num_cpus=num_cpus,
            num_gpus=num_gpus,
            object_store_memory=object_store_memory,
            **internals.ray_temp_dir(str(Path(temp_dir).resolve()) if temp_dir else None),
        )
    # Ray would retry its connection to a head that is not there for minutes, printing only its own
    # warnings: an address where nothing answers is refused first.
    silent = address and unanswered(os.environ["RAY_ADDRESS"] if address == "auto" else address)
    if silent:
        raise _unreachable(address, silent)
    try:
        ray.init(**kwargs)
        if not address:
            _started_here.append(os.getpid())
    except ConnectionError as err:
        raise _unreachable(address, err) from err


def _unreachable(address: str | None, why: object) -> UserError:
    return UserError(
        f"cannot reach a Ray cluster at {address}: {why}",
        "start it with `ray start --head` or check the address (host:port of the head)",
        SUBJECT,
    )


def unanswered(address: str, timeout: float = 5.0) -> str | None:
    """Why no process accepts a connection at the cluster address ``[ray://]host:port``, or None
    (also for an address of another form: Ray then says what it makes of it)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return None
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return None
    except OSError as err:
        return f"nothing answers at {host}:{port} ({err.strerror or err})"


_started_here: list[int] = []  # our pid once start_ray has started a local Ray


def stop_ray() -> None:
    """``ray.shutdown()``, less the second Ray loses on a local Ray it started.

    Ray stops its GCS before the autoscaler monitor; the monitor's SIGTERM
    handler then tries to report to the dead GCS, and Ray waits a full second
    before killing it, in every run (Ray 2.60).  A local Ray has nothing to autoscale, so the monitor that
    ray.init started as our child is killed first.  Linux only (``/proc``);
    elsewhere, and when joined to a cluster, this is plain ``ray.shutdown()``.
    """
    import ray

    if _started_here == [os.getpid()] and Path("/proc").is_dir():
        for pid in children_running(b"autoscaler/_private/monitor.py"):
            os.kill(pid, signal.SIGKILL)
    ray.shutdown()
    _started_here.clear()


def _processes() -> dict[int, tuple[int, bytes]]:
    """Every process this user can see: pid -> (parent pid, command line); Linux only (``/proc``)."""
    found = {}
    for proc in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not proc.name.isdigit():
            continue
        try:
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile, or not ours to read
        found[int(proc.name)] = (parent, command)
    return found


def children_running(script: bytes) -> list[int]:
    """Our child processes whose command line contains ``script``."""
    me = os.getpid()
    return [pid for pid, (parent, command) in _processes().items() if parent == me and script in command]


def kill_descendants() -> None:
    """SIGKILL every process started by this one, and theirs (the local Ray and its workers):
    the last resort of a driver that must end while its main thread is stuck in an env call.
    Actors on a joined cluster end with the driver's job."""
    table = _processes()
    wanted, found = {os.getpid()}, True
    while found:
        found = False
        for pid, (parent, _) in table.items():
            if parent in wanted and pid not in wanted:
                wanted.add(pid)
                found = True
    for pid in wanted - {os.getpid()}:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def require_gpus(wanted: float, asker: str, fix: str, have: float | None = None) -> None:
    """Asking for more GPUs than the Ray cluster has (``have``; None: ask the joined one) is a user error."""
    place = "the Ray cluster" if have is None else "the local Ray (this machine's GPUs, or those faked)"
    if have is None:
        import ray

        have = ray.cluster_resources().get("GPU", 0.0)
    if wanted > have:
        raise UserError(f"{asker} {wanted:g} GPU(s) but {place} has {have:g}", fix)


def local_gpus() -> float:
    """GPUs a local Ray would find on this machine (it counts the CUDA devices, as torch does)."""
    import torch

    return float(torch.cuda.device_count())


def wanted_gpus(config: Any) -> float:
    """GPUs a config asks for its learners: ``num_gpus_per_learner`` per learner (new API stack),
    ``num_gpus`` (old API stack; on the new one it is an unused default, IMPALA's is 1)."""
    if not config.enable_rl_module_and_learner:
        return float(config.num_gpus or 0)
    return float(config.num_gpus_per_learner or 0) * max(1, int(config.num_learners or 0))


GPU_FIX = "set num_gpus_per_learner: 0, or fake GPUs for testing with --ray-num-gpus N"


def check_gpus(config: Any, faked: bool = False, have: float | None = None) -> None:
    """The learner's GPUs must exist (``have``: on the local Ray about to start; None: the joined one).

    ``faked``: the GPUs are ``--ray-num-gpus`` on a local Ray.  Where torch has
    no CUDA the learner then computes on the CPU, so that GPU configs can be
    tried out on a laptop.
    """
    wanted = wanted_gpus(config)
    require_gpus(wanted, "the config asks for", GPU_FIX, have)
    import torch

    if faked and wanted > 0 and not torch.cuda.is_available() and have is None:
        notice("the GPUs are faked and torch has no CUDA here: the learner runs on the CPU")
        config.learners(num_gpus_per_learner=0)
