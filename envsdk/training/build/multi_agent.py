"""Policies, their mapping, and self-play's opponents."""

from __future__ import annotations

import contextlib
import difflib
from typing import Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
from ray.rllib.core import DEFAULT_MODULE_ID
from ray.rllib.policy.policy import PolicySpec

from envsdk.config.own_keys.self_play import SelfPlaySettings
from envsdk.config.yamlio import LineDict
from envsdk.envs.checker import AGENT, EnvInfo
from envsdk.errors import UserError
from envsdk.notices import notice
from envsdk.training.build.models import ModelSettings
from envsdk.training.hooks import self_play

MULTI_AGENT_KEYS = ("policies", "policy_mapping_fn", "policies_to_train", "count_steps_by")


def multi_agent_settings(values: LineDict, info: EnvInfo) -> dict[str, Any]:
    """Settings for ``config.multi_agent``; the env's own policies when the YAML names none."""
    multi_agent = {k: values.pop(k) for k in MULTI_AGENT_KEYS if k in values}
    named = {str(p) for p in multi_agent.get("policies") or ()}
    if named - {DEFAULT_MODULE_ID} and info.agent_spaces and not info.multi_agent:
        # RLlib would build the modules, then fail in its env runner on the env's missing per-agent spaces.
        where = values.where("policies")
        raise UserError(
            f"{where}: policies {sorted(named)} need a multi-agent env, and this env has one agent",
            "drop policies and policy_mapping_fn (one agent trains one policy), or write a MultiAgentEnv",
        )
    if isinstance(multi_agent.get("policies"), list):
        multi_agent["policies"] = set(multi_agent["policies"])
    if info.policies and "policies" not in multi_agent:
        specs = info.policies.items()
        multi_agent["policies"] = {pid: PolicySpec(None, obs, act) for pid, (obs, act) in specs}
        multi_agent.setdefault("policy_mapping_fn", info.policy_mapping_fn)
        notice(f"policies from the env: {', '.join(sorted(info.policies))}")
    elif info.multi_agent and info.agent_spaces and not {"policies", "policy_mapping_fn"} & set(multi_agent):
        _policies_from_agents(multi_agent, info)  # a mapping of the user's names its own policies
    return multi_agent


def _policies_from_agents(multi_agent: dict[str, Any], info: EnvInfo) -> None:
    """A multi-agent env's default policies, from its (possible) agents: one shared policy where every
    agent has the same spaces, else one per agent (named by its id).  RLlib's own default, one policy
    with spaces it cannot tell, fails on such an env (PettingZoo's) with a KeyError."""
    spaces = list(info.agent_spaces.values())
    if all(s == spaces[0] for s in spaces[1:]):
        multi_agent["policies"] = {SHARED_POLICY: PolicySpec(None, *spaces[0])}
        multi_agent["policy_mapping_fn"] = SharedPolicy()
        notice(f"one policy, '{SHARED_POLICY}', for all agents ({len(spaces)}): their spaces are equal")
        return
    multi_agent["policies"] = {
        str(a): PolicySpec(None, obs, act) for a, (obs, act) in info.agent_spaces.items()
    }
    multi_agent["policy_mapping_fn"] = PolicyPerAgent()
    notice(f"one policy per agent (their spaces differ): {', '.join(map(str, info.agent_spaces))}")


SHARED_POLICY = "shared_policy"
"""The one policy of a multi-agent env whose agents all have the same spaces and whose YAML names no
policies (not ``default_policy``: RLlib takes a run with only that policy for a single-agent one)."""


class SharedPolicy:
    """Every agent -> :data:`SHARED_POLICY` (picklable)."""

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
        return SHARED_POLICY


class PolicyPerAgent:
    """Agent ``a`` -> policy ``str(a)`` (picklable)."""

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
        return str(agent_id)


def policy_of(config: AlgorithmConfig, info: EnvInfo) -> dict[Any, str]:
    """Agent id -> policy id for the env's agents (those of the start-up check's first observation,
    and its possible agents), where the mapping says: each id checked against ``policies``
    (:func:`check_mapping`).  A mapping that raises for an agent without a live episode (it reads
    the episode's state) leaves that agent to training."""
    if not info.multi_agent:
        return {AGENT: DEFAULT_MODULE_ID}
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode

    seen = {str(a) for a in info.first_obs}
    agents = [*info.first_obs, *(a for a in info.agent_spaces if a not in seen)]
    mapping: Any = config.policy_mapping_fn
    out = {}
    for agent in agents:
        episode = MultiAgentEpisode()
        try:  # as RLlib's episodes call it: (agent id, the episode); RLlib's default takes a worker
            out[agent] = mapping(agent, episode)
        except TypeError:
            with contextlib.suppress(Exception):
                out[agent] = mapping(agent, episode, worker=None)
        except Exception:
            continue
    check_mapping(
        out, set(config.policies or ()), given=mapping is not AlgorithmConfig.DEFAULT_POLICY_MAPPING_FN
    )
    return out


def check_mapping(mapped: dict[Any, Any], policies: set[str], given: bool = True) -> None:
    """Each policy id the mapping gives an agent is one of ``policies``; else one line naming the
    id, the agent and the policies there are (RLlib would fail deep in its episode, with a bare
    ``AssertionError``, or on a policy without spaces: ``Observation space is not set``).
    ``given``: the mapping is the user's (else RLlib's default, every agent to ``default_policy``)."""
    listed = f"[{', '.join(sorted(map(str, policies)))}]"
    for agent, policy in mapped.items():
        if policy in policies:
            continue
        if not given:
            raise UserError(
                f"policies {listed} and no policy_mapping_fn: RLlib maps every agent to '{policy}',"
                " which is not among them",
                "add policy_mapping_fn: module.function, returning a policy id for each agent id",
            )
        if policy is None:
            raise UserError(
                f"policy_mapping_fn gives agent '{agent}' no policy (it returned None); policies: {listed}",
                "return one of the policies for every agent of the env",
            )
        near = difflib.get_close_matches(str(policy), list(map(str, policies)), n=1, cutoff=0.8)
        raise UserError(
            f"policy_mapping_fn maps agent '{agent}' to policy '{policy}', which is not in"
            f" policies: {listed}",
            (f"did you mean '{near[0]}'? " if near else "") + "name the same ids in policies and the mapping",
        )


def set_up_self_play(
    config: AlgorithmConfig,
    settings: SelfPlaySettings,
    info: EnvInfo,
    multi_agent: dict[str, Any],
    model: ModelSettings,
    env_class: Any,
    env_config: dict[str, Any],
    values: LineDict,
) -> None:
    """``self_play:``: opponents, mapping and ELO (:mod:`envsdk.training.hooks.self_play`) for the
    env's agents.

    ``env_class``: the env's class or factory (its ``self_play_teams``), or the built env."""
    where = values.where("self_play")
    if model.old_stack:
        raise UserError(
            f"{where}: self_play needs the new API stack", "use an RLModule, not a ModelV2 custom_model"
        )
    if config.input_ != "sampler":
        raise UserError(
            f"{where}: self_play needs games to play, not recorded input", "drop input: or self_play:"
        )
    if not info.multi_agent:
        raise UserError(
            f"{where}: self_play needs a multi-agent env with two teams; this env has one agent",
            "use a MultiAgentEnv (or a Unity game with Behavior?team=N behaviors)",
        )
    if not info.first_obs:
        return  # a dry run that did not start the game: its agents and teams are checked when it starts
    # Every agent the env declares: in a turn-based game only the player to move observes at reset.
    spaces = dict(info.agent_spaces)
    assign = self_play.assignment(
        settings,
        self_play.env_teams(env_class, env_config),
        multi_agent.get("policy_mapping_fn"),
        list(spaces),
    )
    seed = int(values.get("seed") or 0)
    trained = self_play.configure(config, settings, assign, spaces, model.module_spec, seed, where)
    for policy, teams in trained.items():
        own = settings.of(policy)
        notice(
            f"self-play: {policy} plays for team{'s' * (len(teams) > 1)} {', '.join(map(str, teams))}:"
            f" it learns on its team's turns, its other agents play frozen snapshots"
            f" ({self_play.opponent_of(policy)}); a snapshot every {own.save_steps} of its steps,"
            f" a new opponent every {own.swap_steps}, a turn of {own.team_change_steps}"
        )
