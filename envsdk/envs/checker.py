"""Checks that an environment does what its spaces promise.

``preflight`` runs before training (one reset and one step, only allowed
actions where there is an action mask) so a mismatch is a clear error rather
than a crash deep inside an RLlib worker; the fuller ``python -m envsdk check``
verdict (:mod:`envsdk.envs.checkup.verdict`) is made of the same checks.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from envsdk.envs.base import MASK_KEY, hooks
from envsdk.envs.observation_layout import mask_lookalike
from envsdk.envs.registry import ResolvedEnv
from envsdk.envs.spaces import conform, sample_allowed
from envsdk.errors import UserError, raise_if_user_error
from envsdk.notices import notice

AGENT = "agent"  # the one agent's id for single-agent envs


def __getattr__(name: str) -> Any:
    """``check_env`` lived here up to 0.3.0, and the tests that ``envsdk new`` wrote then import it
    from here: answered with :mod:`envsdk.envs.checkup.verdict`'s, imported when asked (PEP 562;
    that module imports this one)."""
    if name == "check_env":
        return importlib.import_module("envsdk.envs.checkup.verdict").check_env
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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


def sample_action(env: Any, obs: Any) -> Any:
    """Random actions, only allowed ones where observations carry an action mask."""
    if isinstance(env, MultiAgentEnv):
        return {aid: sample_allowed(env.get_action_space(aid), o) for aid, o in obs.items()}
    return sample_allowed(env.action_space, obs)


MATCH_FIX = "make the observation_space match what reset()/step() return (shape, dtype, bounds)"


@dataclass(frozen=True)
class Finding:
    """A problem nothing can train on, and the line that mends it."""

    text: str
    fix: str = MATCH_FIX


@dataclass
class Verdict:
    """What the checks say of some observations: ``problems`` nothing can train on; ``notes``
    what training takes as it is or converts (another dtype the vector env casts; a value outside
    a Box's bounds where ``env_checks: {observation_bounds: ...}`` is not ``error``);
    ``conformed``: the observations as the space declares them (per agent for a multi-agent env)."""

    problems: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    conformed: Any = None


def check_values(env: Any, obs: Any, where: str, bounds: str = "warn") -> Verdict:
    """The verdict on one reset's or step's observations (RLlib's leniency: values that fit
    their space in another type are converted, with a note, where RLlib's vector env converts
    them; another kind of number, or values the space's dtype cannot hold, are problems)."""
    verdict = Verdict()
    conformed = {}
    for aid, who, value, space in _agent_items(env, obs):
        value, conversions = conform(value, space)
        conformed[aid] = value
        of = f"{where} observation{' of ' + who if who else ''}"
        refused = [Finding(f"{of}{c.path}: {c.refused}", c.fix) for c in conversions if c.refused]
        verdict.problems += refused
        verdict.notes += [
            f"{of}{c.path}: {c.got}, converted to the space's {c.want} (as RLlib does)"
            for c in conversions
            if not c.refused
        ]
        why = mismatch(value, space) if not refused else None
        if why is None:
            continue
        if "values outside" in why and bounds != "error" and not _non_finite(value):
            verdict.notes.append(f"{of}: {why} (env_checks: {{observation_bounds: {bounds}}})")
        else:
            verdict.problems.append(Finding(f"{of}: {why}"))
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


def agent_spaces(env: Any, obs: Any) -> dict[str, tuple[gym.Space, gym.Space]]:
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
        except Refused as wrong:
            env.close()
            raise UserError(f"env '{resolved.name}': {wrong.finding.text}", wrong.finding.fix) from None
        except _StageFailed as failed:
            env.close()
            error = failed.error
            what = f"env '{resolved.name}' failed in {failed.stage}: {type(error).__name__}: {error}"
            if attempt < tries:
                notice(f"{what}; building it again, as the restart settings ask")
                continue
            named = _unread_masks(env)
            raise UserError(
                what,
                named[0]
                if named and failed.stage == "step()"
                else "fix the env; run `python -m envsdk check ENV --debug` for the traceback",
            ) from (failed.error)
        break
    try:
        if verdict.problems:
            first = verdict.problems[0]
            raise UserError(f"env '{resolved.name}': {first.text}", first.fix)
        for note in first_of_each(verdict.notes) + _unread_masks(env):
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


class Refused(Exception):
    """What the env declares or returns cannot run at all, whatever its values: ``reset()`` or
    ``step()`` returned another number of values than gymnasium's API (or RLlib's multi-agent
    one) has (the old gym API's observation alone, or 4 values), or a multi-agent env declares no
    agents' spaces where RLlib's env runner reads them."""

    def __init__(self, finding: Finding):
        super().__init__(finding.text)
        self.finding = finding


STEP_VALUES = 5


def reset_returns(env: Any, out: Any) -> Any:
    """The observation(s) of ``reset()``'s ``(obs, info)``; :class:`Refused` where it returned
    something else (the old API's observation alone: unpacked, a Dict observation's two keys)."""
    multi = isinstance(env, MultiAgentEnv)
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
        return out[0]
    if multi:
        what = "one dict" if isinstance(out, dict) else _what(out)
        text = f"reset() must return (observations, infos), dicts keyed by agent id; yours returned {what}"
    else:
        what = "an observation" if _is_observation(out, env.observation_space) else _what(out)
        text = f"reset() must return (obs, info); yours returned {what}"
    fix = "end reset() with `return obs, {}` (gymnasium's API: the info dict may be empty)"
    raise Refused(Finding(text, fix))


def step_returns(env: Any, out: Any) -> tuple[Any, Any, Any, Any, Any]:
    """``step()``'s five values; :class:`Refused` where it returned another number (the old
    API's ``(obs, reward, done, info)``)."""
    if isinstance(out, tuple) and len(out) == STEP_VALUES:
        return out
    what = _what(out)
    if isinstance(out, tuple) and len(out) == 4:
        what += " (the old gym API's obs, reward, done, info)"
    multi = isinstance(env, MultiAgentEnv)
    five = (
        "obs, rewards, terminateds, truncateds, infos"
        if multi
        else "obs, reward, terminated, truncated, info"
    )
    keyed = ", dicts keyed by agent id (with '__all__' in terminateds and truncateds)" if multi else ""
    raise Refused(
        Finding(
            f"step() must return ({five}){keyed}; yours returned {what}",
            f"end step() with `return {five}`: terminated where the episode ends, truncated where"
            " a time limit cuts it",
        )
    )


def _what(out: Any) -> str:
    return f"{len(out)} values" if isinstance(out, tuple) else f"a {type(out).__name__}"


def _is_observation(value: Any, space: gym.Space) -> bool:
    try:
        return bool(space.contains(conform(value, space)[0]))
    except Exception:
        return False


def runner_spaces(env: Any) -> dict[str, Any]:
    """``observation`` and ``action`` -> the agents' spaces RLlib's multi-agent vector env reads
    from the env before its first reset (``SyncVectorMultiAgentEnv``: ``observation_spaces``,
    else a Dict ``observation_space``, else each of ``possible_agents``)."""
    target = env.unwrapped
    found: dict[str, Any] = {}
    for kind in ("observation", "action"):
        spaces = getattr(target, f"{kind}_spaces", None)
        if spaces is None and isinstance(space := getattr(target, f"{kind}_space", None), gym.spaces.Dict):
            spaces = dict(space.spaces)
        if spaces is None:
            get = getattr(target, f"get_{kind}_space")
            spaces = {agent: get(agent) for agent in getattr(target, "possible_agents", None) or ()}
        found[kind] = spaces
    return found


def _unread_masks(env: Any) -> list[str]:
    """A line for each observation part shaped like an action mask under another name
    (:func:`~envsdk.envs.observation_layout.mask_lookalike`): the networks read it as features,
    and the actions they sample are not kept to it."""
    if isinstance(env, MultiAgentEnv):
        agents = [
            (f" of agent '{a}'", env.get_observation_space(a), env.get_action_space(a))
            for a in env.possible_agents or ()
        ]
    else:
        agents = [("", env.observation_space, env.action_space)]
    found = {who: key for who, obs, act in agents if (key := mask_lookalike(obs, act))}
    return [
        f"the observation part '{key}'{who} is shaped like an action mask (0/1, one entry per choice),"
        f" but is read as features and the actions are not kept to it; to mask with it, name it '{MASK_KEY}'"
        for who, key in found.items()
    ][:1]


def check_runner_spaces(env: Any) -> None:
    """A multi-agent env in whose agents' spaces RLlib's env runner finds no agent (RLlib fails
    with a bare ``StopIteration`` as it maps agents to modules) is :class:`Refused`.  Agents not
    listed there may still observe (a Unity game lists one agent per behavior)."""
    for kind, spaces in runner_spaces(env).items():
        if not spaces:
            raise Refused(
                Finding(
                    f"RLlib's env runner finds no agent in its {kind}_spaces (possible_agents:"
                    f" {list(getattr(env.unwrapped, 'possible_agents', None) or [])}); it reads them"
                    " before its first reset",
                    "set self.possible_agents = [...] in the env's __init__, with observation_spaces"
                    " and action_spaces per agent (or one observation_space and action_space for all)",
                )
            )


def _empty_part(space: Any, path: str = "") -> str | None:
    """Where ``space`` holds an empty Dict or Tuple (``an empty Dict at ['sensors']``), else None."""
    if isinstance(space, gym.spaces.Dict):
        parts: list[tuple[Any, gym.Space]] = list(space.spaces.items())
    elif isinstance(space, gym.spaces.Tuple):
        parts = list(enumerate(space.spaces))
    else:
        return None
    if not parts:
        return f"an empty {type(space).__name__}" + (f" at {path}" if path else "")
    for key, sub in parts:
        found = _empty_part(sub, f"{path}[{key!r}]")
        if found:
            return found
    return None


def check_declared_spaces(env: Any) -> None:
    """An empty Dict or Tuple in an observation or action space is :class:`Refused` before the env
    runs (RLlib's networks fail on one with a bare ``IndexError``)."""
    if isinstance(env, MultiAgentEnv):
        found = runner_spaces(env)
        agents = [
            (f" of agent '{a}'", kind, space) for kind, spaces in found.items() for a, space in spaces.items()
        ]
    else:
        agents = [("", "observation", env.observation_space), ("", "action", env.action_space)]
    for who, kind, space in agents:
        empty = _empty_part(space)
        if empty:
            verb = "observe" if kind == "observation" else "act"
            holds = "holds" if " at " in empty else "is"
            raise Refused(
                Finding(
                    f"the {kind} space{who} {holds} {empty}: nothing to {verb} with",
                    f"give it at least one part, or leave the empty one out of the {kind} space",
                )
            )


def _first_steps(env: Any, bounds: str) -> tuple[EnvInfo, Verdict]:
    """One reset and one step of ``env``, their observations checked; the env's own errors come
    as :class:`_StageFailed`, returns of the wrong form as :class:`Refused`."""
    stage = "reset()"
    try:
        multi = isinstance(env, MultiAgentEnv)
        if multi:
            check_runner_spaces(env)
        check_declared_spaces(env)
        obs = reset_returns(env, env.reset(seed=0))
        verdict = check_values(env, obs, stage, bounds)
        first = verdict.conformed if multi else {AGENT: verdict.conformed}
        if not verdict.problems:
            stage = "step()"
            after = step_returns(env, env.step(sample_action(env, verdict.conformed)))[0]
            stepped = check_values(env, after, stage, bounds)
            verdict.problems += stepped.problems
            verdict.notes += stepped.notes
        stage = "its policy_specs()"
        policies = hooks(env).policy_specs() if multi else None
    except (UserError, Refused):
        raise
    except Exception as err:
        raise _StageFailed(stage, err) from err
    info = EnvInfo(
        multi_agent=multi,
        agent_spaces=agent_spaces(env, obs),
        first_obs=first,
        policies=policies,
        policy_mapping_fn=getattr(env, "policy_mapping_fn", None) if policies is not None else None,
    )
    return info, verdict


def first_of_each(notes: list[str]) -> list[str]:
    """One note per part and kind, the first step's (notes start with the step they name)."""
    firsts: dict[str, str] = {}
    for note in notes:
        firsts.setdefault(note.partition(" observation")[2], note)
    return list(firsts.values())
