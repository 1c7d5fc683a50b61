"""Checks on what a user's env does while it trains, inside every env runner.

The start-up check (:mod:`envsdk.envs.checker`) sees the first steps of one env.  Faults
that come later, on one runner among many, used to surface as someone else's error:
torch's ``probability tensor contains either inf, nan`` for a NaN observation, numpy's
``Output array is the wrong shape`` for a wrong one, and nothing at all for an env whose
``step`` never returned.  A :class:`Guard` sits on the env runner's (vectorized) env and

* times every ``reset``/``step``/``close`` call; a process-wide watchdog
  (:mod:`envsdk.envs.faults.stall_watch`) ends a call that has not returned within the stall bound;
* checks each observation against its space (shape, kind of number, NaN/inf, and the Box
  bounds as ``env_checks.observation_bounds`` says) and each reward (NaN/inf), on the
  whole batch at once, so the cost is a few numpy reductions per vector step
  (benchmarks/env_checks.py measures it); a fault names the env, the runner, the
  sub-env, the agent, the step of its episode, the value and the space.

Settings: :mod:`envsdk.config.own_keys.env_checks`.  Docs: docs/env-faults.md.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np

from envsdk import internals
from envsdk.envs.faults.records import EnvFault, ObservationFault, ResetsInTheSameStep, RewardFault
from envsdk.envs.faults.stall_watch import watch
from envsdk.errors import as_user_error, reports_whole

NUMERIC_KINDS = "biuf"


class EnvRaised(EnvFault):
    """An env's ``reset`` or ``step`` raised (or returned what could not be unpacked); raised from
    the env's own exception, which RLlib's restarts see as any env error."""


RESTART_FIX = (
    "fix the env; to recreate a failing env and go on, set restart_failed_sub_environments: true,"
    " or restart_failed_env_runners: true with remote env runners"
)


# ---- observation checks ------------------------------------------------------------------------


@dataclass(frozen=True)
class Problem:
    """One fault in one observation: what (``kind``), where in it (``path``), and in which sub-env."""

    kind: str  # nan | shape | number | dtype | range | bounds | missing
    path: str
    detail: str
    sub_env: int | None = None


class _Check:
    """A space compiled into a check of values with ``lead`` leading axes (the vector's envs).

    :meth:`fine` is the cheap path, run on every value; :meth:`problem` runs only when it
    fails, and says what is wrong (or None: a bound that ``observation_bounds`` ignores)."""

    def fine(self, value: Any) -> bool:
        return True

    def problem(self, value: Any, path: str) -> Problem | None:
        return None


def _first(mask: np.ndarray, lead: int) -> tuple[int | None, str]:
    """The sub-env (None without a lead axis) and index text of the first True in ``mask``."""
    index = tuple(int(i) for i in np.argwhere(mask)[0])
    sub_env = index[0] if lead else None
    inner = index[lead:]
    return sub_env, "".join(f"[{i}]" for i in inner)


def _as_numbers(check: Any, value: Any, path: str) -> tuple[np.ndarray, Problem | None]:
    """``value`` as an array, and what is wrong with it whatever the bounds: no numbers, the
    wrong shape (``check.shape``: the space's, after ``check.lead`` axes), NaN or infinity."""
    try:
        array = np.asarray(value)
    except (ValueError, TypeError):
        array = np.asarray(None)
    if array.dtype.kind not in NUMERIC_KINDS:
        return array, Problem("number", path, f"{value!r}, where {check.space} holds numbers")
    if array.shape != check.shape:
        lead = check.lead
        got = array.shape[lead:] if array.shape[:lead] == check.shape[:lead] else array.shape
        return array, Problem("shape", path, f"shape {got}, where the space says {check.space.shape}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        bad = ~np.isfinite(array)
        sub_env, index = _first(bad, lead=check.lead)
        return array, Problem("nan", path + index, f"{array[tuple(np.argwhere(bad)[0])]}", sub_env)
    return array, None


def _uncast(check: Any, array: np.ndarray, path: str) -> Problem | None:
    """Values in range whose dtype a vector env cannot stack into the space's (numpy's
    ``same_kind``: float64 for a uint8 image), where nothing else is wrong with them."""
    want = np.dtype(check.space.dtype)
    if np.can_cast(array.dtype, want, "same_kind"):
        return None
    return Problem("dtype", path, f"dtype {array.dtype}, where the space says {want}")


SMALL = 16  # values up to this size are compared in Python (numpy's per-call cost is larger)


class _BoxCheck(_Check):
    """A Box: its shape, and each value within [lo, hi]: the bounds, or (``observation_bounds:
    off``, or none given) the dtype's largest number, so that the same comparisons also fail on
    NaN (every comparison with it is false) and on +-inf.  Integer Boxes whose bounds are their
    dtype's whole range need no comparison (of values of that dtype)."""

    def __init__(self, space: gym.spaces.Box, lead: tuple[int, ...], bounds: str):
        self.space = space
        self.lead = len(lead)
        self.shape = lead + space.shape
        self.bounds = bounds
        self.low, self.high = space.low, space.high
        dtype = np.dtype(space.dtype)
        if dtype.kind == "f":
            big = float(np.finfo(dtype).max)
            lo, hi = (self.low, self.high) if bounds != "off" else (-np.inf, np.inf)
            self.lo = np.maximum(lo, -big).astype(dtype)
            self.hi = np.minimum(hi, big).astype(dtype)
            self.compare = True
        else:
            self.lo, self.hi = self.low, self.high
            info = np.iinfo(dtype) if dtype.kind in "iu" else None
            whole = info is None or bool((self.low <= info.min).all() and (self.high >= info.max).all())
            self.compare = bounds != "off" and not whole
        count = int(np.prod(self.shape))
        self.small = count <= SMALL
        if self.small:  # the bounds as Python numbers, repeated for the leading axes
            self.lo_list = np.broadcast_to(self.lo, self.shape).ravel().tolist()
            self.hi_list = np.broadcast_to(self.hi, self.shape).ravel().tolist()

    def fine(self, value: Any) -> bool:
        if value.__class__ is not np.ndarray or value.shape != self.shape:
            return False
        if not self.compare:  # an integer Box's whole range: only a wider dtype can leave it
            return bool(value.dtype == self.space.dtype)
        if self.small:
            for x, lo, hi in zip(value.ravel().tolist(), self.lo_list, self.hi_list, strict=True):
                if not lo <= x <= hi:
                    return False
            return True
        return bool(((value >= self.lo) & (value <= self.hi)).all())

    def problem(self, value: Any, path: str) -> Problem | None:
        array, found = _as_numbers(self, value, path)
        if found is not None:
            return found
        outside = (array < self.low) | (array > self.high)
        if self.bounds == "off" or not outside.any():
            return _uncast(self, array, path)
        where = tuple(np.argwhere(outside)[0])
        sub_env, index = _first(outside, self.lead)
        inner = where[self.lead :]
        low, high = self.low[inner], self.high[inner]
        return Problem("bounds", path + index, f"{array[where]}, outside [{low}, {high}]", sub_env)


class _IntegerCheck(_Check):
    """Discrete, MultiDiscrete and MultiBinary: the shape, and values within the space's range."""

    def __init__(self, space: gym.Space, lead: tuple[int, ...]):
        self.space = space
        self.lead = len(lead)
        shape = tuple(space.shape or ())
        if isinstance(space, gym.spaces.Discrete):
            low, count = np.asarray(space.start, np.int64), np.asarray(space.n, np.int64)
        elif isinstance(space, gym.spaces.MultiDiscrete):
            low, count = np.asarray(space.start, np.int64), np.asarray(space.nvec, np.int64)
        else:
            low, count = np.zeros(shape, np.int64), np.full(shape, 2, np.int64)
        self.low, self.high = low, low + count - 1
        self.shape = lead + shape

    def fine(self, value: Any) -> bool:
        if self.lead == 0 and not self.shape:  # one Discrete value
            try:
                return bool(self.low <= value <= self.high) and int(value) == value
            except (TypeError, ValueError):
                return False
        if value.__class__ is not np.ndarray or value.shape != self.shape:
            return False
        return bool((value >= self.low).all() and (value <= self.high).all())

    def problem(self, value: Any, path: str) -> Problem | None:
        array, found = _as_numbers(self, value, path)
        if found is not None:
            return found
        bad = (array < self.low) | (array > self.high) | (array != np.floor(array))
        if not bad.any():
            return _uncast(self, array, path)
        sub_env, index = _first(bad, self.lead)
        return Problem(
            "bounds", path + index, f"{array[tuple(np.argwhere(bad)[0])]}, not in {self.space}", sub_env
        )


class _DictCheck(_Check):
    def __init__(self, parts: dict[Any, _Check]):
        self.parts = parts

    def fine(self, value: Any) -> bool:
        try:
            return all(check.fine(value[key]) for key, check in self.parts.items())
        except (KeyError, IndexError, TypeError):
            return False

    def problem(self, value: Any, path: str) -> Problem | None:
        for key, check in self.parts.items():
            try:
                part = value[key]
            except (KeyError, IndexError, TypeError):
                return Problem("missing", path, f"no part {key!r} (a {type(value).__name__})")
            found = check.problem(part, f"{path}[{key!r}]") if not check.fine(part) else None
            if found is not None:
                return found
        return None


def compile_check(space: gym.Space, lead: tuple[int, ...], bounds: str) -> _Check:
    """The check of values of ``space`` (batched over ``lead``); spaces without numbers
    (Text, Graph, Sequence) are not checked."""
    if isinstance(space, gym.spaces.Box):
        return _BoxCheck(space, lead, bounds)
    if isinstance(space, gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.MultiBinary):
        return _IntegerCheck(space, lead)
    if isinstance(space, gym.spaces.Dict):
        return _DictCheck({k: compile_check(s, lead, bounds) for k, s in space.spaces.items()})
    if isinstance(space, gym.spaces.Tuple):
        return _DictCheck({i: compile_check(s, lead, bounds) for i, s in enumerate(space.spaces)})
    return _Check()


# ---- the guard on a runner's env ---------------------------------------------------------------


@dataclass(frozen=True)
class Site:
    """Which env, in which env runner: the start of every fault's message."""

    env: str
    runner: int

    def describe(self, sub_env: int | None = None, agent: Any = None) -> str:
        parts = [f"env runner {self.runner}" if self.runner else "the local env runner"]
        if sub_env is not None:
            parts.append(f"sub-env {sub_env}")
        if agent is not None:
            parts.append(f"agent {agent!r}")
        return f"env '{self.env}' ({', '.join(parts)})"


FIXES = {
    "nan": "an observation must be finite: look for a division by zero or a value the simulator lost",
    "shape": "return what observation_space declares, or declare what the env returns",
    "number": "return numbers (a numpy array) as observation_space declares",
    "missing": "return every part that observation_space declares",
    "bounds": "widen the space's low/high, clip in the env, or set env_checks: {observation_bounds: warn}",
    "dtype": "return arrays of the space's dtype: np.zeros(shape, dtype), or value.astype(dtype)",
    "range": "clip the values to the space's bounds, or declare a dtype that holds them (the space's"
    " dtype cannot: the vector env failed to cast them)",
}


class Guard:
    """Stall timing and observation/reward checks on an env runner's vectorized env.

    It replaces the env object's ``reset``, ``step`` and ``close`` with its own (instance
    attributes: the class and everything else RLlib reads stay RLlib's)."""

    def __init__(
        self,
        env: Any,
        site: Site,
        bounds: str,
        stall_s: float,
        warn: Callable[[str], None],
        count: Callable[[], None],
    ):
        self.env = env
        self.site = site
        self.bounds = bounds
        self.stall_s = stall_s
        self.warn = warn  # says a fault that observation_bounds: warn lets pass (once per part)
        self.count = count  # counts each of them
        self.warned: set[str] = set()
        self.num_envs = int(env.num_envs)
        # The step of sub-env i's episode is ``self.t - self.started[i]`` (vector steps since reset).
        self.t = 0
        self.started = np.zeros(self.num_envs, np.int64)
        self.since: float | None = None  # time.monotonic() when the call in progress began
        self.reported: float | None = None  # the ``since`` of the call reported as stuck
        self.call = ""
        self.thread = 0
        self.batched: dict[tuple[int, int], _Check] = {}  # check_agents' checks, by space and rows
        self._prepare()
        self._reset, self._step, self._close = env.reset, env.step, env.close
        env.reset, env.step, env.close = self.reset, self.step, self.close
        watch(self)

    def _enter(self, call: str) -> None:
        self.call = call
        self.thread = threading.get_ident()
        self.since = time.monotonic()

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        self._enter("reset")
        try:
            out = self._reset(*args, **kwargs)
        except Exception as err:
            self._explain(err)
            raise self._raised(err, "reset", "at reset") from err
        finally:
            self.since = None
        self.t = 0
        self.started[:] = 0
        self._check_observations(out[0], "at reset")
        return out

    def step(self, actions: Any) -> Any:
        self._enter("step")
        try:
            out = self._step(actions)
        except Exception as err:
            self._explain(err)
            raise self._raised(err, "step", None) from err
        finally:
            self.since = None
        self.t += 1
        self._count(out[2], out[3])
        self._check_observations(out[0], None)
        self._check_rewards(out[1])
        return out

    def close(self, *args: Any, **kwargs: Any) -> Any:
        self._enter("close")
        try:
            return self._close(*args, **kwargs)
        finally:
            self.since = None

    def check_agents(self, space: gym.Space, observations: Any, agents: list[Any], steps: list[int]) -> None:
        """Several agents' observations of one ``space``, stacked (a row per agent, as a loop that
        acts for many agents at once has them; ``steps``: each one's step of its episode), checked
        as ``step`` checks them, in one batched check; a fault names the agent."""
        key = (id(space), len(agents))
        check = self.batched.get(key)
        if check is None:
            check = self.batched[key] = compile_check(space, (len(agents),), self.bounds)
        if not check.fine(observations):
            found = check.problem(observations, "")
            if found is not None:
                row = found.sub_env or 0
                when = f"at step {steps[row]} of its episode"
                self._fault(Problem(found.kind, found.path, found.detail, None), when, agents[row])

    def check_reward(self, reward: float, agent: Any) -> None:
        """One agent's reward, as ``step`` checks each (a loop that acts for many agents at once)."""
        if not math.isfinite(reward):
            self._reward_fault(reward, None, agent)

    # -- hooks for the single- and multi-agent guards
    def _prepare(self) -> None:
        """Compile the checks of the env's spaces."""
        raise NotImplementedError

    def _count(self, terminated: Any, truncated: Any) -> None:
        raise NotImplementedError

    def _check_observations(self, observations: Any, when: str | None) -> None:
        raise NotImplementedError

    def _check_rewards(self, rewards: Any) -> None:
        raise NotImplementedError

    def _explain(self, err: Exception) -> None:
        """Turn a sub-env's bad observation, which fails inside the vector env, into its fault."""

    # -- shared
    def _raised(self, err: Exception, call: str, when: str | None) -> Exception:
        """The env's exception as a fault that names the env, its runner and the step of its
        episode (the error itself where it already names them, or asks RLlib to recreate the env)."""
        from ray.rllib.env.env_errors import StepFailedRecreateEnvError

        says_it_all = reports_whole(err) or as_user_error(err) is not None
        if says_it_all or isinstance(err, StepFailedRecreateEnvError):
            return err  # a fault that names itself (a Unity player's, ours), or RLlib's own signal
        what = f"{type(err).__name__}: {err}".strip().rstrip(":")
        if isinstance(err, ValueError | TypeError) and "unpack" in str(err):
            what += f" (an env's {call}() returns " + (
                "(obs, reward, terminated, truncated, info))" if call == "step" else "(obs, info))"
            )
        where = self.site.describe()
        if self.num_envs > 1:
            where += f" (one of its {self.num_envs} sub-envs)"
            when = when or f"within the first {self.t - int(self.started.min()) + 1} steps of its episodes"
        return EnvRaised(f"{where} raised {what} in {call}() {self._when(None, when)}; fix: {RESTART_FIX}")

    def _when(self, sub_env: int | None, when: str | None) -> str:
        if when is not None:
            return when
        step = self.t - int(self.started[sub_env] if sub_env is not None else self.started.min())
        return f"at step {step} of its episode"

    def _fault(self, problem: Problem, when: str | None, agent: Any = None) -> None:
        what = {
            "nan": f"a non-finite observation: obs{problem.path} = {problem.detail}",
            "shape": f"an observation{problem.path and ' part ' + problem.path} of {problem.detail}",
            "number": f"an observation{problem.path and ' part ' + problem.path} of {problem.detail}",
            "dtype": f"an observation{problem.path and ' part ' + problem.path} of {problem.detail}",
            "range": f"obs{problem.path} = {problem.detail}",
            "missing": f"an observation with {problem.detail}",
            "bounds": f"obs{problem.path} = {problem.detail}",
        }[problem.kind]
        where = self.site.describe(problem.sub_env if self.num_envs > 1 else None, agent)
        message = f"{where} returned {what} {self._when(problem.sub_env, when)}"
        if problem.kind == "bounds" and self.bounds == "warn":
            self.count()
            if problem.path not in self.warned:
                self.warned.add(problem.path)
                self.warn(f"{message} (config: env_checks: {{observation_bounds: error}} to stop on it)")
            return
        raise ObservationFault(f"{message}; fix: {FIXES[problem.kind]}")

    def _reward_fault(self, value: Any, sub_env: int | None, agent: Any = None) -> None:
        raise RewardFault(
            f"{self.site.describe(sub_env if self.num_envs > 1 else None, agent)} returned the reward"
            f" {value} {self._when(sub_env, None)};"
            " fix: a reward must be a finite number (look for a division by zero or an overflow)"
        )


class SingleAgentGuard(Guard):
    """On a gymnasium vector env: observations and rewards come batched over its sub-envs."""

    def _prepare(self) -> None:
        mode = self.env.metadata.get("autoreset_mode")
        if str(getattr(mode, "value", mode)).lower().replace("_", "") == "samestep":
            raise ResetsInTheSameStep(
                f"{self.site.describe()}: its vector env resets a sub-env in the step that ends its episode"
                " (gymnasium's autoreset_mode SAME_STEP); RLlib 2.60's env runners read every vector env"
                " as resetting at the next step, so each episode would end on the next one's first"
                " observation; fix: build it with autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP"
            )
        space = self.env.single_observation_space
        self.check = compile_check(space, (self.num_envs,), self.bounds)
        self.one = compile_check(space, (), self.bounds)

    def _count(self, terminated: Any, truncated: Any) -> None:
        # gymnasium's vector envs return bool arrays: a byte search is the cheapest "any".
        if b"\x01" in terminated.tobytes() or b"\x01" in truncated.tobytes():
            self.started[terminated | truncated] = self.t + 1  # their next step is their reset

    def _check_observations(self, observations: Any, when: str | None) -> None:
        if not self.check.fine(observations):
            found = self.check.problem(observations, "")
            if found is not None:
                self._fault(found, when)

    def _check_rewards(self, rewards: Any) -> None:
        total = sum(rewards.tolist()) if self.num_envs <= SMALL else rewards.sum()
        if not math.isfinite(total):
            sub_env = int(np.argwhere(~np.isfinite(rewards))[0][0])
            self._reward_fault(rewards[sub_env], sub_env)

    def _explain(self, err: Exception) -> None:
        # gymnasium's SyncVectorEnv keeps each sub-env's observation before it stacks them.
        parts = internals.sub_env_observations(self.env.unwrapped)
        if not isinstance(err, ValueError | TypeError) or parts is None:
            return
        found = [
            (i, p)
            for i, obs in enumerate(parts)
            if not self.one.fine(obs) and (p := self.one.problem(obs, ""))
        ]
        # A value outside the bounds fails to stack only where the dtype cannot hold it (300 for
        # uint8: a failed cast); then it is the fault, whatever observation_bounds lets pass.
        cast = isinstance(err, TypeError)
        for sub_env, problem in found:
            if problem.kind != "bounds" or cast:
                self.t += 1  # the step that failed to stack is not counted yet
                kind = "range" if problem.kind == "bounds" else problem.kind
                self._fault(Problem(kind, problem.path, problem.detail, sub_env), None)


class MultiAgentGuard(Guard):
    """On RLlib's vector of multi-agent envs: one dict per sub-env, each agent against its own space."""

    def _prepare(self) -> None:
        self.checks: dict[Any, _Check] = {}

    def _check_for(self, agent: Any) -> _Check:
        check = self.checks.get(agent)
        if check is None:
            space = (
                self.env.single_observation_spaces.get(agent) if self.env.single_observation_spaces else None
            )
            check = self.checks[agent] = (
                compile_check(space, (), self.bounds) if space is not None else _Check()
            )
        return check

    def _count(self, terminated: Any, truncated: Any) -> None:
        for sub_env, (term, trunc) in enumerate(zip(terminated, truncated, strict=True)):
            if term.get("__all__") or trunc.get("__all__"):
                self.started[sub_env] = self.t + 1

    def _check_observations(self, observations: Any, when: str | None) -> None:
        for sub_env, per_agent in enumerate(observations):
            for agent, obs in per_agent.items():
                check = self._check_for(agent)
                if not check.fine(obs):
                    found = check.problem(obs, "")
                    if found is not None:
                        self._fault(Problem(found.kind, found.path, found.detail, sub_env), when, agent)

    def _check_rewards(self, rewards: Any) -> None:
        for sub_env, per_agent in enumerate(rewards):
            for agent, reward in per_agent.items():
                if not math.isfinite(reward):
                    self._reward_fault(reward, sub_env, agent)
