"""Private CPython and Ray core: the process's exit, Ray's object store, temp folders, loggers."""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Iterator
from typing import Any

# ---- CPython ------------------------------------------------------------------------------------


def run_exit_hooks() -> None:
    """Run the ``atexit`` hooks now: :func:`envsdk.errors.exit_now` then skips the interpreter's
    teardown (a second, after RLlib and torch are loaded) with ``os._exit``."""
    atexit._run_exitfuncs()


# ---- Ray core -----------------------------------------------------------------------------------


# The algorithms that, with no remote env runners or learners, make no Ray call in training,
# checkpointing or restoring other than those ``ray.put`` calls.  IMPALA and APPO are not among them:
# they start aggregator actors even then.  Checked per algorithm in tests/base/test_internals.py.
RAY_FREE_ALGORITHMS = (
    "ray.rllib.algorithms.ppo.ppo:PPO",
    "ray.rllib.algorithms.dqn.dqn:DQN",
    "ray.rllib.algorithms.sac.sac:SAC",
    "envsdk.training.substitutes.replay.training_step:DQN",  # RLlib's, with transition replay
    "envsdk.training.substitutes.replay.training_step:SAC",
)


def trains_without_ray(algo_class: type) -> bool:
    """Whether ``algo_class`` (exactly: not a subclass, whose code we do not know) is one of those."""
    return f"{algo_class.__module__}:{algo_class.__qualname__}" in RAY_FREE_ALGORITHMS


@contextlib.contextmanager
def without_object_store() -> Iterator[None]:
    """Train an Algorithm whose env runners and learners all live in this process, with no Ray running.

    RLlib's ``EnvRunnerGroup`` puts its config (when built) and the weights
    (at every ``sync_weights``) into Ray's object store for remote env runners
    to fetch, even when there are none; the first such ``ray.put`` would
    start a whole local Ray (GCS, raylet, agents: most of a short run's
    start and shut-down; benchmarks/phases.py).  Inside this block, while Ray is not
    running, ``ray.put`` hands the value back as is.  Nothing resolves it:
    a run trained this way has no remote env runner.  Any other Ray call
    starts Ray as usual, and from then on ``ray.put`` is Ray's own again.

    Upstream: RLlib 2.60.0 (``EnvRunnerGroup`` puts whether or not a remote runner exists), no
    upstream issue found (searched 2026-11-28).
    """
    import ray

    original = ray.put

    def put(value: Any, **kwargs: Any) -> Any:
        return original(value, **kwargs) if ray.is_initialized() else value

    ray.put = put
    try:
        yield
    finally:
        ray.put = original


# Loggers whose warnings are about RLlib's own API (stack banners, deprecations), not the user's run.
RLLIB_API_LOGGERS = ("ray.rllib", "ray._common.deprecation")
