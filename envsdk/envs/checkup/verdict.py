"""The ``python -m envsdk check`` verdict on an env: gymnasium's and RLlib's own checkers, then
ours (values inside their spaces, seeded resets reproducible, the step rate, each policy's default
network), its lines in the order the checks ran.  An exception of the env's ends the verdict with one
line that names where; nothing ends in a traceback."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.envs.base import MASK_KEY, has_action_mask, hooks
from envsdk.envs.checker import (
    AGENT,
    Finding,
    Refused,
    agent_spaces,
    check_declared_spaces,
    check_runner_spaces,
    check_values,
    first_of_each,
    reset_returns,
    sample_action,
    step_returns,
)
from envsdk.envs.registry import ResolvedEnv
from envsdk.envs.spaces import SpaceError, allowed_version, conform
from envsdk.errors import raise_if_user_error
from envsdk.notices import plain_warning

OK, WARN, FAIL, FIX = "ok", "warn", "FAIL", "fix"


@dataclass
class CheckReport:
    """The ``python -m envsdk check`` verdict: its lines in the order the checks ran."""

    env: str
    lines: list[tuple[str, str]] = field(default_factory=list)  # (OK | WARN | FAIL | FIX, text)
    steps_per_s: float = 0.0
    models: list[str] = field(default_factory=list)  # the default model each policy would get (PPO)
    error: BaseException | None = None  # the env's exception that ended the check (for --debug)

    def _of(self, status: str) -> list[str]:
        return [text for kind, text in self.lines if kind == status]

    @property
    def passed(self) -> list[str]:
        return self._of(OK)

    @property
    def warnings(self) -> list[str]:
        return self._of(WARN)

    @property
    def problems(self) -> list[str]:
        return self._of(FAIL)

    def add(self, status: str, text: str) -> None:
        self.lines.append((status, text))

    def fail(self, text: str, fix: str | None = None) -> None:
        self.add(FAIL, text)
        if fix:
            self.add(FIX, fix)

    @property
    def ok(self) -> bool:
        return not self.problems

    def render(self) -> str:
        lines = [f"env {self.env}"]
        lines += [f"  {status:<5} {text}" for status, text in self.lines]
        lines += [f"  model {m}" for m in self.models]
        lines.append(f"  rate  {self.steps_per_s:,.0f} steps/s (random actions, one core)")
        lines.append("verdict: " + ("PASS" if self.ok else f"FAIL ({len(self.problems)} problem(s))"))
        return "\n".join(lines)


def _run_external(report: CheckReport, label: str, fn: Any) -> None:
    """Another package's checker: passed, passed with its warnings (each once), or failed."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fn()
        except Exception as err:
            report.fail(f"{label}: {type(err).__name__}: {_first_line(err)}")
            return
    ours = ("deprecat", "different from the unwrapped")  # RLlib's deprecations; our mask wrapper
    said = [plain_warning(w.message) for w in caught if not any(o in str(w.message) for o in ours)]
    said = list(dict.fromkeys(said))
    if not said:
        report.add(OK, f"{label} passed")
        return
    report.add(OK, f"{label} passed, with {len(said)} warning{'s' if len(said) > 1 else ''}:")
    for text in said:
        report.add(WARN, f"{label}: {text}")


def _first_line(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [""])[0]


def _gymnasium_check(checker: Any, env: Any) -> None:
    """gymnasium's checker; its seeding and determinism checks become a warning: an env that does
    not reproduce an episode from a seed trains (RLlib trains it), only not reproducibly.  An env
    whose :class:`~envsdk.envs.base.RLlibHooks` say ``reseedable = False`` says why."""
    try:
        checker(env, skip_render_check=True)
    except AssertionError as err:
        text = str(err).lower()
        if "seed" not in text and "determinis" not in text:
            raise
        env_hooks = hooks(env.unwrapped)
        why = (
            f"cannot be reseeded after start ({env_hooks.reseed_note})"
            if not env_hooks.reseedable
            else f"{_first_line(err).rstrip('.')}: results will not be reproducible"
        )
        warnings.warn(why, stacklevel=1)


class _Conformed(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Observations converted to their space's types, as RLlib's vector env converts them, for
    gymnasium's checker, which refuses (say) float64 for a float32 Box that RLlib trains on (and
    rebuilds an env that has a spec with its wrappers: they record their arguments)."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)

    def observation(self, observation: Any) -> Any:
        return conform(observation, self.observation_space)[0]


class _MaskRespecting(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """For gymnasium's checker, which steps with unmasked random actions (sampled before its
    resets, too): a forbidden choice becomes the first allowed one of its branch.  A game that
    trusts its action masks may crash on a forbidden action."""

    def __init__(self, env: gym.Env):
        gym.utils.RecordConstructorArgs.__init__(self)
        super().__init__(env)
        self._obs: Any = None

    def reset(self, **kwargs: Any) -> Any:
        self._obs, info = self.env.reset(**kwargs)
        return self._obs, info

    def step(self, action: Any) -> Any:
        out = self.env.step(allowed_version(self.env.action_space, action, self._obs[MASK_KEY]))
        self._obs = out[0]
        return out


# One line about the network a policy with these spaces gets (the networks' layer, above this one).
Describe = Callable[[gym.Space, gym.Space], str]


def check_env(
    resolved: ResolvedEnv, env_config: dict, steps: int = 2000, describe: Describe | None = None
) -> CheckReport:
    """The ``python -m envsdk check`` verdict for one env; ``describe`` adds each policy's network.
    An exception of the env's (in its constructor, reset, step or close) ends the check with one
    line that names where (:attr:`CheckReport.error` keeps it); a UserError passes through."""
    report = CheckReport(resolved.name)
    stage = ["its constructor"]  # where the check is, for an exception of the env's
    env = None
    try:
        env = resolved.make(env_config)
        _check(report, resolved, env, env_config, steps, describe, stage)
        stage[0] = "close()"
        env.close()
    except Refused as wrong:
        report.fail(wrong.finding.text, wrong.finding.fix)
    except Exception as err:
        raise_if_user_error(err)
        report.error = err
        report.fail(
            f"{stage[0]} raised {type(err).__name__}: {_first_line(err)}",
            "fix the env",
        )
    if env is not None and stage[0] != "close()":
        with contextlib.suppress(Exception):  # the check already failed; its line says why
            env.close()
    return report


def _check(
    report: CheckReport,
    resolved: ResolvedEnv,
    env: Any,
    env_config: dict,
    steps: int,
    describe: Describe | None,
    stage: list[str],
) -> None:
    multi = isinstance(env, MultiAgentEnv)
    if multi:
        check_runner_spaces(env)
    check_declared_spaces(env)
    stage[0] = "reset(seed=123)"
    first = reset_returns(env, env.reset(seed=123))
    stage[0] = "step()"
    step_returns(env, env.step(sample_action(env, conform_all(env, first))))
    spaces = agent_spaces(env, first if multi else {AGENT: first})
    masked = any(has_action_mask(obs) for obs, _ in spaces.values())
    stage[0] = "the check"
    _external_checker(report, resolved, env, env_config, masked)
    if describe is not None:
        _networks(report, _named_spaces(env, spaces), describe)
    stage[0] = "reset(seed=123)"
    _reseeding(report, env)
    stage[0] = "a random step"
    _random_steps(report, env, steps, masked)


def conform_all(env: Any, obs: Any) -> Any:
    """Observations as their spaces declare them (per agent for a multi-agent env)."""
    return check_values(env, obs, "").conformed


def _networks(
    report: CheckReport, spaces: dict[str, tuple[gym.Space, gym.Space]], describe: Describe
) -> None:
    for who, (obs, act) in spaces.items():
        try:
            report.models.append(f"{who}: {describe(obs, act)}")
        except SpaceError as err:
            report.fail(f"{who}: {err}")


def _external_checker(
    report: CheckReport, resolved: ResolvedEnv, env: Any, env_config: dict, masked: bool
) -> None:
    """gymnasium's checker (RLlib's for a multi-agent env), on observations converted as RLlib
    converts them: our own steps say what was converted."""
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    multi = isinstance(env, MultiAgentEnv)
    label = "RLlib multi-agent checker" if multi else "gymnasium checker"
    if masked and multi:
        report.add(WARN, f"{label} skipped: it steps with random actions, and this env masks some")
    elif multi:
        _run_external(report, label, lambda: check_multiagent_environments(env))
    else:
        checked = resolved.make(env_config)
        try:
            target: gym.Env = _Conformed(checked.unwrapped)
            target = _MaskRespecting(target) if masked else target
            _run_external(report, label, lambda: _gymnasium_check(gymnasium_check_env, target))
        finally:
            checked.close()


def _reseeding(report: CheckReport, env: Any) -> None:
    first = reset_returns(env, env.reset(seed=123))
    again = reset_returns(env, env.reset(seed=123))
    same = all(
        np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(_flat(first), _flat(again), strict=False)
    )
    if same:
        report.add(OK, "reset(seed=123) twice gives the same observation")
    else:
        report.add(
            WARN, "reset(seed=123) twice gave different observations: results will not be reproducible"
        )


def _random_steps(report: CheckReport, env: Any, steps: int, masked: bool) -> None:
    """Up to ``steps`` random steps (5 s at most): every observation checked, the rate measured."""
    multi = isinstance(env, MultiAgentEnv)
    verdict = check_values(env, reset_returns(env, env.reset(seed=123)), "reset()")
    problems, notes, n, start = verdict.problems, verdict.notes, 0, time.perf_counter()
    obs = verdict.conformed
    while n < steps and time.perf_counter() - start < 5.0:
        try:
            out = env.step(sample_action(env, obs))
        except Exception as err:
            problems.append(
                Finding(f"step {n + 1} raised {type(err).__name__}: {_first_line(err)}", "fix the env")
            )
            break
        obs, reward, terminated, truncated, _ = step_returns(env, out)
        n += 1
        verdict = check_values(env, obs, f"step {n}")
        obs = verdict.conformed
        if not problems:
            problems += verdict.problems
            notes += verdict.notes
        if multi:
            done = terminated.get("__all__", False) or truncated.get("__all__", False)
        else:
            done = terminated or truncated
            if not np.isscalar(reward):
                problems.append(Finding(f"step {n}: reward is {type(reward).__name__}, not a number"))
        if done:
            obs = check_values(env, reset_returns(env, env.reset()), "reset()").conformed
    report.steps_per_s = n / max(time.perf_counter() - start, 1e-9)
    for note in first_of_each(notes)[:3]:
        report.add(WARN, note)
    for problem in problems[:3]:
        report.fail(problem.text, problem.fix if problem is problems[0] else None)
    if not problems:
        allowed = " (allowed ones)" if masked else ""
        report.add(OK, f"{n} random steps{allowed}: every observation inside its space")


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
