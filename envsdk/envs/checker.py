"""Checks that an environment does what its spaces promise.

``preflight`` runs before training (one reset and one step, only allowed
actions where there is an action mask) so a mismatch is a clear error rather
than a crash deep inside an RLlib worker; ``check_env``
is the fuller ``python -m envsdk check`` verdict: gymnasium's and RLlib's own
checkers plus ours (values inside their spaces, seeded resets reproducible,
step rate).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.envs.base import MASK_KEY, has_action_mask, hooks
from envsdk.envs.default_models.choice import describe
from envsdk.envs.default_models.spaces import SpaceError, allowed_version, sample_allowed
from envsdk.envs.registry import ResolvedEnv
from envsdk.errors import UserError, raise_if_user_error

AGENT = "agent"  # the one agent's id for single-agent envs


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
        return f"{value!r} is not an integer in [{space.start}, {int(space.start) + int(space.n)})"
    return f"{type(value).__name__} value {value!r:.60} not in {space}"


def _agent_items(env: Any, obs: Any) -> list[tuple[str, Any, gym.Space]]:
    if isinstance(env, MultiAgentEnv):
        return [(f"agent '{aid}'", o, env.get_observation_space(aid)) for aid, o in obs.items()]
    return [("", obs, env.observation_space)]


def _sample_action(env: Any, obs: Any) -> Any:
    """Random actions, only allowed ones where observations carry an action mask."""
    if isinstance(env, MultiAgentEnv):
        return {aid: sample_allowed(env.get_action_space(aid), o) for aid, o in obs.items()}
    return sample_allowed(env.action_space, obs)


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
    # Every agent seen in the first reset (and the env's possible agents): id -> (obs space, action space).
    # A single-agent env has one, under AGENT.
    agent_spaces: dict[str, tuple[gym.Space, gym.Space]]
    first_obs: dict[str, Any]  # agent id -> its observation after reset(seed=0)
    # Multi-agent envs that know their policies (e.g. one per Unity behavior) offer
    # defaults for a YAML that names none: policy id -> (obs space, action space).
    policies: dict[str, tuple[gym.Space, gym.Space]] | None = None
    policy_mapping_fn: Any = None


def unbuilt(target: Any) -> EnvInfo:
    """What is known of an env that was not built (a dry run of a game): whether it is multi-agent."""
    multi = isinstance(target, type) and issubclass(target, MultiAgentEnv)
    return EnvInfo(multi_agent=multi, agent_spaces={}, first_obs={})


def _agent_spaces(env: Any, obs: Any) -> dict[str, tuple[gym.Space, gym.Space]]:
    if not isinstance(env, MultiAgentEnv):
        return {AGENT: (env.observation_space, env.action_space)}
    agents = list(obs) + [a for a in getattr(env, "possible_agents", None) or [] if a not in obs]
    return {str(a): (env.get_observation_space(a), env.get_action_space(a)) for a in agents}


@contextlib.contextmanager
def preflight(resolved: ResolvedEnv, env_config: dict) -> Iterator[tuple[Any, EnvInfo]]:
    """Build the env once, reset and step it; yields (env, info) and closes the env after.

    A mismatch between what the env returns and its spaces, or an error in
    its constructor, reset or step, is a UserError.  The env stays open in
    the ``with`` block so the caller can build the policy networks against it.
    """
    try:
        env = resolved.make(env_config)
    except Exception as err:
        raise_if_user_error(err)
        raise UserError(
            f"env '{resolved.name}' failed to start: {type(err).__name__}: {err}",
            "check env_config; run `python -m envsdk check ENV --debug` for the traceback",
        ) from err
    try:
        stage = "reset()"
        try:
            obs, _ = env.reset(seed=0)
            first = obs if isinstance(env, MultiAgentEnv) else {AGENT: obs}
            problems = values_problems(env, obs, stage)
            if not problems:
                stage = "step()"
                after, *_ = env.step(_sample_action(env, obs))
                problems = values_problems(env, after, stage)
            stage = "its policy_specs()"
            multi = isinstance(env, MultiAgentEnv)
            policies = hooks(env).policy_specs() if multi else None
            info = EnvInfo(
                multi_agent=multi,
                agent_spaces=_agent_spaces(env, obs),
                first_obs=first,
                policies=policies,
                policy_mapping_fn=getattr(env, "policy_mapping_fn", None) if policies is not None else None,
            )
        except UserError:
            raise
        except Exception as err:
            raise UserError(
                f"env '{resolved.name}' failed in {stage}: {type(err).__name__}: {err}",
                "fix the env; run `python -m envsdk check ENV --debug` for the traceback",
            ) from err
        if problems:
            raise UserError(
                f"env '{resolved.name}': {problems[0]}",
                "make the observation_space match what reset()/step() return (shape, dtype, bounds)",
            )
        yield env, info
    finally:
        env.close()


@dataclass
class CheckReport:
    env: str
    passed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    steps_per_s: float = 0.0
    models: list[str] = field(default_factory=list)  # the default model each policy would get (PPO)

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        lines = [f"env {self.env}"]
        lines += [f"  ok    {p}" for p in self.passed]
        lines += [f"  warn  {w}" for w in self.warnings]
        lines += [f"  FAIL  {p}" for p in self.problems]
        lines += [f"  model {m}" for m in self.models]
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
    ours = ("deprecat", "different from the unwrapped")  # RLlib's deprecations; our mask wrapper
    report.warnings += [f"{label}: {w.message}" for w in caught if not any(o in str(w.message) for o in ours)]
    report.passed.append(f"{label} passed")


def _gymnasium_check(checker: Any, env: Any) -> None:
    """gymnasium's checker; its reseeding checks become a warning for envs whose
    :class:`~envsdk.envs.base.RLlibHooks` say ``reseedable = False``."""
    try:
        checker(env, skip_render_check=True)
    except AssertionError as err:
        env_hooks = hooks(env.unwrapped)
        if env_hooks.reseedable or "seed" not in str(err).lower():
            raise
        warnings.warn(f"cannot be reseeded after start ({env_hooks.reseed_note})", stacklevel=1)


class _MaskRespecting(gym.Wrapper):
    """For gymnasium's checker, which steps with unmasked random actions (sampled before its
    resets, too): a forbidden choice becomes the first allowed one of its branch.  A game that
    trusts its action masks may crash on a forbidden action."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self._obs: Any = None

    def reset(self, **kwargs: Any) -> Any:
        self._obs, info = self.env.reset(**kwargs)
        return self._obs, info

    def step(self, action: Any) -> Any:
        out = self.env.step(allowed_version(self.env.action_space, action, self._obs[MASK_KEY]))
        self._obs = out[0]
        return out


def check_env(resolved: ResolvedEnv, env_config: dict, steps: int = 2000) -> CheckReport:
    """The ``python -m envsdk check`` verdict for one env."""
    report = CheckReport(resolved.name)
    env = resolved.make(env_config)
    try:
        _check(report, resolved, env, env_config, steps)
    finally:
        env.close()
    return report


def _check(report: CheckReport, resolved: ResolvedEnv, env: Any, env_config: dict, steps: int) -> None:
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    multi = isinstance(env, MultiAgentEnv)
    first, _ = env.reset(seed=123)
    spaces = _agent_spaces(env, first if multi else {AGENT: first})
    label = "RLlib multi-agent checker" if multi else "gymnasium checker"
    masked = any(has_action_mask(obs) for obs, _ in spaces.values())
    if masked and multi:
        report.warnings.append(f"{label} skipped: it steps with random actions, and this env masks some")
    elif multi:
        _run_external(report, label, lambda: check_multiagent_environments(env))
    else:
        checked = resolved.make(env_config)
        try:
            target = _MaskRespecting(checked.unwrapped) if masked else checked.unwrapped
            _run_external(report, label, lambda: _gymnasium_check(gymnasium_check_env, target))
        finally:
            checked.close()
    for who, (obs, act) in _named_spaces(env, spaces).items():
        try:
            report.models.append(f"{who}: {describe(obs, act, {})}")
        except SpaceError as err:
            report.problems.append(f"{who}: {err}")

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
        try:
            obs, reward, terminated, truncated, _ = env.step(_sample_action(env, obs))
        except Exception as err:
            problems.append(f"step {n + 1} raised {type(err).__name__}: {err}")
            break
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
        allowed = " (allowed ones)" if masked else ""
        report.passed.append(f"{n} random steps{allowed}: every observation inside its space")


def _named_spaces(env: Any, spaces: dict[str, tuple[gym.Space, gym.Space]]) -> dict[str, tuple]:
    """Who gets which default model: the env's policies if it names them, else each agent."""
    policies = hooks(env).policy_specs()
    if policies is not None:
        return {f"policy {pid}": value for pid, value in policies.items()}
    if list(spaces) == [AGENT]:
        return {"default_policy": spaces[AGENT]}
    return {f"agent {aid}": value for aid, value in spaces.items()}


def _flat(obs: Any) -> list[Any]:
    if isinstance(obs, dict):
        return [v for k in sorted(obs) for v in _flat(obs[k])]
    if isinstance(obs, tuple):
        return [v for o in obs for v in _flat(o)]
    return [obs]
