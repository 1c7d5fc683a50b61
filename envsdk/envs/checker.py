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
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.envs.base import MASK_KEY, has_action_mask, hooks
from envsdk.envs.registry import ResolvedEnv
from envsdk.envs.spaces import SpaceError, allowed_version, conform, sample_allowed
from envsdk.errors import UserError, raise_if_user_error
from envsdk.notices import notice

AGENT = "agent"  # the one agent's id for single-agent envs


def mismatch(value: Any, space: gym.Space) -> str | None:
    """Why ``value`` is not in ``space`` (None when it is), before any conversion."""
    try:
        if space.contains(value):
            return None
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    if isinstance(space, gym.spaces.Box):
        return _box_mismatch(np.asarray(value), space)
    why = _part_mismatch(value, space)
    if why is not None:
        return why
    if isinstance(space, gym.spaces.Discrete):
        return f"{value!r} is not an integer in [{space.start}, {int(space.start) + int(space.n)})"
    return f"{type(value).__name__} value {value!r:.60} not in {space}"


def _box_mismatch(arr: np.ndarray, space: gym.spaces.Box) -> str:
    """Why an array is not in a Box: its shape, its dtype, else its values."""
    if arr.shape != space.shape:
        return f"shape {arr.shape} but the space says {space.shape}"
    if arr.dtype.kind not in "biuf" or not np.can_cast(arr.dtype, np.dtype(str(space.dtype))):
        return f"dtype {arr.dtype} but the space says {space.dtype}"
    return f"values outside [{space.low.min()}, {space.high.max()}]: {arr.min()}..{arr.max()}"


def _part_mismatch(value: Any, space: gym.Space) -> str | None:
    """For a dict in a Dict space or a tuple in a Tuple space (of its length): its missing keys, or
    the first part not in its subspace, named by its key or index; None otherwise."""
    if isinstance(space, gym.spaces.Dict) and isinstance(value, dict):
        missing = set(space.spaces) - set(value)
        if missing:
            return f"missing keys {sorted(missing)}"
        parts = [(f"['{key}']", value[key], sub) for key, sub in space.spaces.items()]
    elif isinstance(space, gym.spaces.Tuple) and isinstance(value, tuple) and len(value) == len(space.spaces):
        parts = [(f"[{i}]", part, sub) for i, (part, sub) in enumerate(zip(value, space.spaces, strict=True))]
    else:
        return None
    for label, part, sub in parts:
        why = mismatch(part, sub)
        if why:
            return f"{label} {why}"
    return None


def _agent_items(env: Any, obs: Any) -> list[tuple[Any, str, Any, gym.Space]]:
    """(agent id, its label for messages, its observation, its space); one item, id None, for a
    single-agent env."""
    if isinstance(env, MultiAgentEnv):
        return [(aid, f"agent '{aid}'", o, env.get_observation_space(aid)) for aid, o in obs.items()]
    return [(None, "", obs, env.observation_space)]


def _sample_action(env: Any, obs: Any) -> Any:
    """Random actions, only allowed ones where observations carry an action mask."""
    if isinstance(env, MultiAgentEnv):
        return {aid: sample_allowed(env.get_action_space(aid), o) for aid, o in obs.items()}
    return sample_allowed(env.action_space, obs)


@dataclass
class Verdict:
    """What the checks say of some observations: ``problems`` nothing can train on; ``notes``
    what training takes as it is or converts (another dtype; a value outside a Box's bounds
    where ``env_checks: {observation_bounds: ...}`` is not ``error``); ``conformed``: the
    observations as the space declares them (per agent for a multi-agent env)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    conformed: Any = None


def check_values(env: Any, obs: Any, where: str, bounds: str = "warn") -> Verdict:
    """The verdict on one reset's or step's observations (RLlib's leniency: values that fit
    their space in another type are converted, with a note, as RLlib's vector env converts them)."""
    verdict = Verdict()
    conformed = {}
    for aid, who, value, space in _agent_items(env, obs):
        value, conversions = conform(value, space)
        conformed[aid] = value
        of = f"{where} observation{' of ' + who if who else ''}"
        verdict.notes += [
            f"{of}{c.path}: {c.got}, converted to the space's {c.want} (as RLlib does)" for c in conversions
        ]
        why = mismatch(value, space)
        if why is None:
            continue
        if "values outside" in why and bounds != "error" and not _non_finite(value):
            verdict.notes.append(f"{of}: {why} (env_checks: {{observation_bounds: {bounds}}})")
        else:
            verdict.problems.append(f"{of}: {why}")
    verdict.conformed = conformed if isinstance(env, MultiAgentEnv) else conformed[None]
    return verdict


def _non_finite(value: Any) -> bool:
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        return False
    return not np.isfinite(array).all()


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
def preflight(
    resolved: ResolvedEnv, env_config: dict, bounds: str = "warn", tries: int = 1
) -> Iterator[tuple[Any, EnvInfo]]:
    """Build the env once, reset and step it; yields (env, info) and closes the env after.

    A mismatch between what the env returns and its spaces that RLlib could not train on either,
    or an error in its constructor, reset or step, is a UserError; what RLlib converts (another
    dtype, lists for arrays) or lets pass (``bounds``: ``env_checks.observation_bounds``) is a
    notice.  ``tries`` > 1 (a run that asks RLlib to recreate failing envs or runners): an env
    that raises in its first reset or step is built again, that many times in all, as RLlib
    would recreate it.  The env is built as RLlib builds it, with an ``EnvContext`` (worker 0).
    The env stays open in the ``with`` block so the caller can build the policy networks on it.
    """
    from ray.rllib.env.env_context import EnvContext

    for attempt in range(1, tries + 1):
        try:
            env = resolved.make(EnvContext(env_config, worker_index=0, num_workers=0))
        except Exception as err:
            raise_if_user_error(err)
            raise UserError(
                f"env '{resolved.name}' failed to start: {type(err).__name__}: {err}",
                "check env_config; run `python -m envsdk check ENV --debug` for the traceback",
            ) from err
        try:
            info, verdict = _first_steps(env, bounds)
        except UserError:
            env.close()
            raise
        except _StageFailed as failed:
            env.close()
            error = failed.error
            what = f"env '{resolved.name}' failed in {failed.stage}: {type(error).__name__}: {error}"
            if attempt < tries:
                notice(f"{what}; building it again, as the restart settings ask")
                continue
            raise UserError(
                what, "fix the env; run `python -m envsdk check ENV --debug` for the traceback"
            ) from (failed.error)
        break
    try:
        if verdict.problems:
            raise UserError(
                f"env '{resolved.name}': {verdict.problems[0]}",
                "make the observation_space match what reset()/step() return (shape, dtype, bounds)",
            )
        for note in _first_of_each(verdict.notes):
            notice(f"env '{resolved.name}': {note}")
        yield env, info
    finally:
        env.close()


class _StageFailed(Exception):
    """The env's own error in one stage of the start-up check (``stage``: ``reset()``, ...)."""

    def __init__(self, stage: str, error: Exception):
        super().__init__(stage)
        self.stage = stage
        self.error = error


def _first_steps(env: Any, bounds: str) -> tuple[EnvInfo, Verdict]:
    """One reset and one step of ``env``, their observations checked; the env's own errors come
    as :class:`_StageFailed`."""
    stage = "reset()"
    try:
        obs, _ = env.reset(seed=0)
        verdict = check_values(env, obs, stage, bounds)
        first = verdict.conformed if isinstance(env, MultiAgentEnv) else {AGENT: verdict.conformed}
        if not verdict.problems:
            stage = "step()"
            after, *_ = env.step(_sample_action(env, verdict.conformed))
            stepped = check_values(env, after, stage, bounds)
            verdict.problems += stepped.problems
            verdict.notes += stepped.notes
        stage = "its policy_specs()"
        multi = isinstance(env, MultiAgentEnv)
        policies = hooks(env).policy_specs() if multi else None
    except UserError:
        raise
    except Exception as err:
        raise _StageFailed(stage, err) from err
    info = EnvInfo(
        multi_agent=multi,
        agent_spaces=_agent_spaces(env, obs),
        first_obs=first,
        policies=policies,
        policy_mapping_fn=getattr(env, "policy_mapping_fn", None) if policies is not None else None,
    )
    return info, verdict


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
            else f"{str(err).splitlines()[0]}: results will not be reproducible"
        )
        warnings.warn(why, stacklevel=1)


class _Conformed(gym.ObservationWrapper):
    """Observations converted to their space's types, as RLlib's vector env converts them, for
    gymnasium's checker, which refuses (say) float64 for a float32 Box that RLlib trains on."""

    def observation(self, observation: Any) -> Any:
        return conform(observation, self.observation_space)[0]


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


# One line about the network a policy with these spaces gets (the networks' layer, above this one).
Describe = Callable[[gym.Space, gym.Space], str]


def check_env(
    resolved: ResolvedEnv, env_config: dict, steps: int = 2000, describe: Describe | None = None
) -> CheckReport:
    """The ``python -m envsdk check`` verdict for one env; ``describe`` adds each policy's network."""
    report = CheckReport(resolved.name)
    env = resolved.make(env_config)
    try:
        _check(report, resolved, env, env_config, steps, describe)
    finally:
        env.close()
    return report


def _check(
    report: CheckReport,
    resolved: ResolvedEnv,
    env: Any,
    env_config: dict,
    steps: int,
    describe: Describe | None,
) -> None:
    multi = isinstance(env, MultiAgentEnv)
    first, _ = env.reset(seed=123)
    spaces = _agent_spaces(env, first if multi else {AGENT: first})
    masked = any(has_action_mask(obs) for obs, _ in spaces.values())
    _external_checker(report, resolved, env, env_config, masked)
    if describe is not None:
        _networks(report, _named_spaces(env, spaces), describe)
    _reseeding(report, env)
    _random_steps(report, env, steps, masked)


def _networks(
    report: CheckReport, spaces: dict[str, tuple[gym.Space, gym.Space]], describe: Describe
) -> None:
    for who, (obs, act) in spaces.items():
        try:
            report.models.append(f"{who}: {describe(obs, act)}")
        except SpaceError as err:
            report.problems.append(f"{who}: {err}")


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
        report.warnings.append(f"{label} skipped: it steps with random actions, and this env masks some")
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


def _random_steps(report: CheckReport, env: Any, steps: int, masked: bool) -> None:
    """Up to ``steps`` random steps (5 s at most): every observation checked, the rate measured."""
    multi = isinstance(env, MultiAgentEnv)
    obs, _ = env.reset(seed=123)
    verdict = check_values(env, obs, "reset()")
    problems, notes, n, start = verdict.problems, verdict.notes, 0, time.perf_counter()
    obs = verdict.conformed
    while n < steps and time.perf_counter() - start < 5.0:
        try:
            obs, reward, terminated, truncated, _ = env.step(_sample_action(env, obs))
        except Exception as err:
            problems.append(f"step {n + 1} raised {type(err).__name__}: {err}")
            break
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
                problems.append(f"step {n}: reward is {type(reward).__name__}, not a number")
        if done:
            obs = check_values(env, env.reset()[0], "reset()").conformed
    report.steps_per_s = n / max(time.perf_counter() - start, 1e-9)
    report.warnings += _first_of_each(notes)[:3]
    if problems:
        report.problems += problems[:3]
    else:
        allowed = " (allowed ones)" if masked else ""
        report.passed.append(f"{n} random steps{allowed}: every observation inside its space")


def _first_of_each(notes: list[str]) -> list[str]:
    """One note per part and kind, the first step's (notes start with the step they name)."""
    firsts: dict[str, str] = {}
    for note in notes:
        firsts.setdefault(note.partition(" observation")[2], note)
    return list(firsts.values())


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
