"""Checks that an environment does what its spaces promise.

``preflight`` runs before training (one reset and one step) so a mismatch is
a clear error rather than a crash deep inside an RLlib worker; ``check_env``
is the fuller ``python -m envsdk check`` verdict: gymnasium's and RLlib's own
checkers plus ours (values inside their spaces, seeded resets reproducible,
step rate).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.base import MASK_KEY
from envsdk.errors import UserError
from envsdk.registry import ResolvedEnv


def mismatch(value: Any, space: gym.Space) -> str | None:
    """Why ``value`` is not in ``space`` (None when it is)."""
    try:
        if space.contains(value):
            return None
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    if isinstance(space, gym.spaces.Box):
        arr = np.asarray(value)
        if arr.shape != space.shape:
            return f"shape {arr.shape} but the space says {space.shape}"
        if arr.dtype != space.dtype:
            return f"dtype {arr.dtype} but the space says {space.dtype}"
        return f"values outside [{space.low.min()}, {space.high.max()}]: {arr.min()}..{arr.max()}"
    if isinstance(space, gym.spaces.Dict) and isinstance(value, dict):
        missing = set(space.spaces) - set(value)
        if missing:
            return f"missing keys {sorted(missing)}"
        for key, sub in space.spaces.items():
            why = mismatch(value[key], sub)
            if why:
                return f"['{key}'] {why}"
    if isinstance(space, gym.spaces.Discrete):
        return f"{value!r} is not an integer in [{space.start}, {space.start + space.n})"
    return f"{type(value).__name__} value {value!r:.60} not in {space}"


def _agent_items(env: Any, obs: Any) -> list[tuple[str, Any, gym.Space]]:
    if isinstance(env, MultiAgentEnv):
        return [(f"agent '{aid}'", o, env.get_observation_space(aid)) for aid, o in obs.items()]
    return [("", obs, env.observation_space)]


def _sample(space: gym.Space, obs: Any) -> Any:
    """A random action, respecting the observation's action mask if it has one."""
    if isinstance(space, gym.spaces.Discrete) and isinstance(obs, dict) and MASK_KEY in obs:
        return space.sample(mask=np.asarray(obs[MASK_KEY], dtype=np.int8))
    return space.sample()


def _sample_action(env: Any, obs: Any) -> Any:
    if isinstance(env, MultiAgentEnv):
        return {aid: _sample(env.get_action_space(aid), o) for aid, o in obs.items()}
    return _sample(env.action_space, obs)


def values_problems(env: Any, obs: Any, where: str) -> list[str]:
    problems = []
    for who, value, space in _agent_items(env, obs):
        why = mismatch(value, space)
        if why:
            problems.append(f"{where} observation{' of ' + who if who else ''}: {why}")
    return problems


@dataclass
class EnvInfo:
    """What training needs to know about an env before it starts."""

    multi_agent: bool
    observation_space: gym.Space | None
    action_space: gym.Space | None
    # Multi-agent envs that know their policies (e.g. one per Unity behavior) offer
    # defaults for a YAML that names none: policy id -> (obs space, action space).
    policies: dict[str, tuple[gym.Space, gym.Space]] | None = None
    policy_mapping_fn: Any = None


def preflight(resolved: ResolvedEnv, env_config: dict) -> EnvInfo:
    """Build the env once, reset and step it, and raise a UserError on a mismatch."""
    try:
        env = resolved.make(env_config)
    except UserError:
        raise
    except Exception as err:
        raise UserError(
            f"env '{resolved.name}' failed to start: {type(err).__name__}: {err}",
            "check env_config; run `python -m envsdk check ENV --debug` for the traceback",
        ) from err
    try:
        stage = "reset()"
        obs, _ = env.reset(seed=0)
        problems = values_problems(env, obs, stage)
        if not problems:
            stage = "step()"
            obs, *_ = env.step(_sample_action(env, obs))
            problems = values_problems(env, obs, stage)
    except Exception as err:
        env.close()
        raise UserError(
            f"env '{resolved.name}' failed in {stage}: {type(err).__name__}: {err}",
            "fix the env; run `python -m envsdk check ENV --debug` for the traceback",
        ) from err
    try:
        if problems:
            raise UserError(
                f"env '{resolved.name}': {problems[0]}",
                "make the observation_space match what reset()/step() return (shape, dtype, bounds)",
            )
        multi = isinstance(env, MultiAgentEnv)
        offers = multi and callable(getattr(env, "policy_specs", None))
        return EnvInfo(
            multi_agent=multi,
            observation_space=None if multi else env.observation_space,
            action_space=None if multi else env.action_space,
            policies=env.policy_specs() if offers else None,
            policy_mapping_fn=getattr(env, "policy_mapping_fn", None) if offers else None,
        )
    finally:
        env.close()


@dataclass
class CheckReport:
    env: str
    passed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    steps_per_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        lines = [f"env {self.env}"]
        lines += [f"  ok    {p}" for p in self.passed]
        lines += [f"  warn  {w}" for w in self.warnings]
        lines += [f"  FAIL  {p}" for p in self.problems]
        lines.append(f"  rate  {self.steps_per_s:,.0f} steps/s (random actions, one core)")
        lines.append("verdict: " + ("PASS" if self.ok else f"FAIL ({len(self.problems)} problem(s))"))
        return "\n".join(lines)


def _run_external(report: CheckReport, label: str, fn: Any) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
        except Exception as err:
            report.problems.append(f"{label}: {type(err).__name__}: {str(err).splitlines()[0]}")
            return
    report.warnings += [f"{label}: {w.message}" for w in caught if "deprecat" not in str(w.message)]
    report.passed.append(f"{label} passed")


def _gymnasium_check(checker: Any, env: Any) -> None:
    """gymnasium's checker; its reseeding checks become a warning for envs that declare
    ``metadata["reseedable"] = False`` (a Unity player takes its seed once, at launch)."""
    try:
        checker(env, skip_render_check=True)
    except AssertionError as err:
        if env.metadata.get("reseedable", True) or "seed" not in str(err).lower():
            raise
        note = env.metadata.get("reseed_note", "by design")
        warnings.warn(f"cannot be reseeded after start ({note})", stacklevel=1)


def check_env(resolved: ResolvedEnv, env_config: dict, steps: int = 2000) -> CheckReport:
    """The ``python -m envsdk check`` verdict for one env."""
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    report = CheckReport(resolved.name)
    env = resolved.make(env_config)
    multi = isinstance(env, MultiAgentEnv)
    if multi:
        _run_external(report, "RLlib multi-agent checker", lambda: check_multiagent_environments(env))
    else:
        checked = resolved.make(env_config)
        _run_external(
            report,
            "gymnasium checker",
            lambda: _gymnasium_check(gymnasium_check_env, checked.unwrapped),
        )
        checked.close()

    first, _ = env.reset(seed=123)
    again, _ = env.reset(seed=123)
    same = all(
        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(_flat(first), _flat(again), strict=False)
    )
    (report.passed if same else report.warnings).append(
        "reset(seed=123) twice gives the same observation"
        if same
        else "reset(seed=123) twice gave different observations: results will not be reproducible"
    )

    problems, obs, n, start = [], first, 0, time.perf_counter()
    problems += values_problems(env, obs, "reset()")
    while n < steps and time.perf_counter() - start < 5.0:
        obs, reward, terminated, truncated, _ = env.step(_sample_action(env, obs))
        n += 1
        if not problems:
            problems += values_problems(env, obs, f"step {n}")
        if multi:
            done = terminated.get("__all__", False) or truncated.get("__all__", False)
        else:
            done = terminated or truncated
            if not np.isscalar(reward):
                problems.append(f"step {n}: reward is {type(reward).__name__}, not a number")
        if done:
            obs, _ = env.reset()
    report.steps_per_s = n / max(time.perf_counter() - start, 1e-9)
    if problems:
        report.problems += problems[:3]
    else:
        report.passed.append(f"{n} random steps: every observation inside its space")
    env.close()
    return report


def _flat(obs: Any) -> list[Any]:
    if isinstance(obs, dict):
        return [v for k in sorted(obs) for v in _flat(obs[k])]
    if isinstance(obs, tuple):
        return [v for o in obs for v in _flat(o)]
    return [obs]
