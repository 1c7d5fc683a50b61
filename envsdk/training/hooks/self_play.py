"""Self-play with ELO: ML-Agents' ghost trainers and their controller, on RLlib's MultiRLModule.

Each agent plays a policy for a team.  One policy may play for several teams (a symmetric game such as
Dodgeball: both teams run ``Dodgeball``), or each team its own (an asymmetric game such as
StrikersVsGoalie: ``Striker`` for team 0, ``Goalie`` for team 1), or a mixture.  One team learns at a
time; every other agent plays a frozen snapshot of its own policy.

For each policy ``P`` that self-play trains, the MultiRLModule holds:

* ``P``: the learning module (in ``policies_to_train``; it learns while its team learns);
* ``P@opponent``: a frozen module P's agents on the other teams act with.  Its weights are a
  snapshot; it is never in a train batch, so its optimizer never steps and keeps
  no state.  Changing the snapshot writes its weights on the learner and syncs
  only this module to the env runners;
* ``@self_play`` (one for all policies, ``learner_only``): the ledger.  It holds
  the snapshot pool's weights, every ELO rating, the step counters, the learning
  team and the current opponents.  Being a module of the learner, it is saved
  with every checkpoint and comes back with ``--resume``, ``--restore`` and after
  a SIGTERM, with no file of its own.

Which module an agent uses is :class:`SelfPlayMapping`: agent -> (policy, team)
from the env or the YAML, then ``P`` for the learning team and ``P@opponent``
for every other.  Each env runner's copy is told the learning team after every
iteration.  Each policy has its own settings (``self_play.policies``, ML-Agents'
per-behavior ``self_play``), its own snapshot pool, opponent and rating.

Each finished episode is a game: on the env runner, :func:`log_games` takes the
sign of the learning team's final reward (the sum of its agents' last rewards:
win, draw, loss, as ML-Agents does) and counts it.  After each iteration,
:func:`after_iteration` applies those games to the ELO ratings one by one (against
the rating of the snapshot the other side plays: the learning policy's own in a
symmetric game, the other team's policy's in an asymmetric one, as ML-Agents'
controller asks the other team's ghost trainer), then, as ML-Agents does and
counted in agent steps of the iteration's results, each with the policy's settings:

* ``save_steps`` steps of a learning module since its last snapshot: a new
  snapshot (the pool keeps the last ``window``), rated at the current ELO;
* ``team_change`` learning steps since the last change (all the learning team's
  policies together; policies on one team share one team_change): the next team
  learns, so in an asymmetric game each team learns for its own policy's count;
* ``swap_steps`` steps of the opponent module, or a team change: a new opponent
  for each policy with agents off the learning team, the current weights with
  probability ``play_against_latest_model_ratio``, else a snapshot of the pool
  drawn uniformly.

Steps are checked once per iteration, so each event happens at the first
iteration end past its step count.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from ray.rllib.core import COMPONENT_LEARNER, COMPONENT_RL_MODULE
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule
from ray.rllib.policy.policy import PolicySpec

from envsdk.config.own_keys.self_play import SelfPlaySettings, TeamsByName
from envsdk.errors import UserError
from envsdk.notices import notice
from envsdk.progress import SELF_PLAY as RESULTS
from envsdk.training.hooks.callbacks import add_callback, reads_the_episode_only

OPPONENT = "@opponent"  # P + OPPONENT: the frozen module the other teams of P's role act with
LEDGER = "@self_play"  # the learner-only module that keeps the pool and the ratings
LATEST = -1  # opponent "snapshot id" of a copy of the learning weights taken at the swap
ELO_K = 16.0  # ML-Agents' ELO step size
WIN, DRAW, LOSS = 1.0, 0.5, 0.0
GAME_KEYS = {WIN: "wins", DRAW: "draws", LOSS: "losses"}


def opponent_of(policy: str) -> str:
    return policy + OPPONENT


def is_self_play_module(module_id: str) -> bool:
    """Whether a module is self-play's own (an opponent or the ledger), not a policy the run trains."""
    return module_id == LEDGER or module_id.endswith(OPPONENT)


# ---- who plays for whom ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RoleAndTeam:
    """Agent id -> (policy, team) from a team function and the run's policy mapping (picklable)."""

    team_of: Callable[[Any], int]
    policy_of: Callable[..., str] | None = None  # None: every agent plays the one policy `default_policy`
    default: str = "default_policy"

    def __call__(self, agent_id: Any) -> tuple[str, int]:
        policy = self.policy_of(agent_id, None, worker=None) if self.policy_of else self.default
        return str(policy), int(self.team_of(agent_id))


class SelfPlayMapping:
    """The ``policy_mapping_fn`` of a self-play run: learning team -> ``P``, other teams -> ``P@opponent``.

    Each env runner holds its own copy; :func:`after_iteration` sets ``learning_team`` on every copy.
    """

    def __init__(self, assign: Callable[[Any], tuple[str, int]], learning_team: int):
        self.assign = assign
        self.learning_team = learning_team

    def __call__(self, agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
        policy, team = self.assign(agent_id)
        return policy if team == self.learning_team else opponent_of(policy)

    def policy_of(self, agent_id: Any) -> str:
        """The policy that the agent's side trains, whichever team learns now (for exports)."""
        return self.assign(agent_id)[0]


# ---- the ledger: ratings, counters and the pool ------------------------------------------------------


def elo_change(rating: float, opponent: float, result: float) -> float:
    """ELO: K x (result - the expected score against ``opponent``); result 1 win, 0.5 draw, 0 loss."""
    expected = 1.0 / (1.0 + 10.0 ** ((opponent - rating) / 400.0))
    return float(ELO_K * (result - expected))


def game_result(final_team_reward: float) -> float:
    """ML-Agents' reading of a game: the sign of the team's final reward."""
    return WIN if final_team_reward > 0 else LOSS if final_team_reward < 0 else DRAW


def interleaved(wins: int, draws: int, losses: int) -> list[float]:
    """An iteration's games in an even order, so that the ratings move as they would game by game."""
    spread = [
        ((i + 0.5) / n, result)
        for result, n in ((WIN, wins), (DRAW, draws), (LOSS, losses))
        for i in range(n)
    ]
    return [result for _, result in sorted(spread)]


@dataclass
class PolicyRecord:
    """One self-play policy's part of the ledger."""

    elo: float
    opponent: int = 0  # the snapshot id the other teams play with (LATEST: a copy taken at the swap)
    opponent_elo: float = 0.0
    pool: list[dict[str, float]] = field(default_factory=list)  # [{"id": i, "elo": e}], oldest first
    snapshots_taken: int = 0
    steps: int = 0  # agent steps of the learning module
    opponent_steps: int = 0  # agent steps of the opponent module
    last_save: int = 0
    last_swap: int = 0
    wins: int = 0
    draws: int = 0
    losses: int = 0

    def opponent_snapshot(self) -> dict[str, float] | None:
        """The pool entry of the current opponent (None for LATEST, rated as the learner itself)."""
        return next((s for s in self.pool if int(s["id"]) == self.opponent), None)


@dataclass
class Ledger:
    """Everything self-play keeps between iterations; JSON in the ledger module."""

    teams: list[int]
    learning_team: int
    policies: dict[str, PolicyRecord]
    learning_steps: int = 0  # the learning teams' policies' learning steps, for team_change
    last_team_change: int = 0
    team_changes: int = 0
    swaps: int = 0
    policy_teams: dict[str, list[int]] = field(default_factory=dict)  # {}: every policy on every team

    @classmethod
    def new(cls, settings: SelfPlaySettings, policy_teams: dict[str, list[int]]) -> Ledger:
        """A fresh ledger; ``policy_teams``: each policy -> the teams its agents play for."""
        records = {}
        for policy in policy_teams:
            elo = float(settings.of(policy).initial_elo)
            records[policy] = PolicyRecord(
                elo=elo, opponent=0, opponent_elo=elo, pool=[{"id": 0, "elo": elo}], snapshots_taken=1
            )
        teams = sorted(set().union(*policy_teams.values()))
        return cls(
            teams=teams,
            learning_team=teams[0],
            policies=records,
            policy_teams={p: sorted(t) for p, t in policy_teams.items()},
        )

    def teams_of(self, policy: str) -> list[int]:
        return self.policy_teams.get(policy) or self.teams

    def learns(self, policy: str) -> bool:
        """Whether the policy has agents on the learning team (its learning module plays)."""
        return self.learning_team in self.teams_of(policy)

    def opposes(self, policy: str) -> bool:
        """Whether the policy has agents off the learning team (its opponent module plays)."""
        return any(team != self.learning_team for team in self.teams_of(policy))

    def rated_against(self, policy: str) -> str:
        """The policy whose opponent snapshot a learning policy's games are rated against: its own where
        it plays both sides, else the first policy playing for another team."""
        if self.opposes(policy):
            return policy
        return next(p for p in sorted(self.policies) if self.opposes(p))

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Ledger:
        doc = json.loads(text)
        doc["policies"] = {p: PolicyRecord(**r) for p, r in doc["policies"].items()}
        return cls(**doc)

    def play(self, policy: str, results: list[float]) -> None:
        """Apply a learning policy's games against the other side's current opponent, one by one.

        The opponent snapshot loses what the learner gains.  Against a policy's current weights
        (LATEST) the learner is rated as itself in a symmetric game, and against that other policy's
        rating, which moves too, in an asymmetric one (ML-Agents' ``policy_elos[-1]``).
        """
        rec = self.policies[policy]
        other = self.policies[self.rated_against(policy)]
        snapshot = other.opponent_snapshot()
        for result in results:
            opponent = snapshot["elo"] if snapshot is not None else other.elo
            change = elo_change(rec.elo, opponent, result)
            rec.elo += change
            if snapshot is not None:
                snapshot["elo"] -= change
            elif other is not rec:
                other.elo -= change
            setattr(rec, GAME_KEYS[result], getattr(rec, GAME_KEYS[result]) + 1)
        for one in (rec, other):
            taken = one.opponent_snapshot()
            one.opponent_elo = taken["elo"] if taken is not None else one.elo

    def advance(
        self, settings: SelfPlaySettings, steps: dict[str, tuple[int, int]], rng: np.random.Generator
    ) -> tuple[list[str], dict[str, int]]:
        """Count an iteration's (learning, opponent) agent steps per policy; decide its events.

        Returns the policies to snapshot now and policy -> the new opponent (a snapshot id or LATEST).
        Snapshots are recorded here; their weights are the caller's to copy.
        """
        snapshot_now, swap_now = [], {}
        for policy, (learning, opposing) in steps.items():
            rec, own = self.policies[policy], settings.of(policy)
            rec.steps += learning
            rec.opponent_steps += opposing
            if self.learns(policy):  # not a game begun before a team change, finishing as it began
                self.learning_steps += learning
            if rec.steps - rec.last_save >= own.save_steps:
                rec.last_save = rec.steps
                rec.pool = [*rec.pool, {"id": rec.snapshots_taken, "elo": rec.elo}][-own.window :]
                rec.snapshots_taken += 1
                snapshot_now.append(policy)
        # The learning team's turn: its policies' one team_change (SelfPlaySettings.check_team_change).
        turn = min(settings.of(p).team_change_steps for p in self.policies if self.learns(p))
        team_change = self.learning_steps - self.last_team_change >= turn
        if team_change:
            self.last_team_change = self.learning_steps
            self.team_changes += 1
            self.learning_team = self.teams[(self.teams.index(self.learning_team) + 1) % len(self.teams)]
        for policy, rec in self.policies.items():
            own = settings.of(policy)
            if team_change and not self.opposes(policy):  # it learns now: its opponent module rests
                rec.last_swap = rec.opponent_steps
            elif team_change or rec.opponent_steps - rec.last_swap >= own.swap_steps:
                rec.last_swap = rec.opponent_steps
                latest = rng.random() < own.play_against_latest_model_ratio
                rec.opponent = LATEST if latest else int(rec.pool[int(rng.integers(len(rec.pool)))]["id"])
                snapshot = rec.opponent_snapshot()
                rec.opponent_elo = snapshot["elo"] if snapshot is not None else rec.elo
                swap_now[policy] = rec.opponent
                self.swaps += 1
        return snapshot_now, swap_now

    def metrics(self, games: dict[str, tuple[int, int, int]]) -> dict[str, Any]:
        """What each result reports (under ``self_play/``): ratings, this iteration's game rates, the pool."""
        out: dict[str, Any] = {"learning_team": self.learning_team, "team_changes": self.team_changes}
        for policy, rec in self.policies.items():
            wins, draws, losses = games.get(policy, (0, 0, 0))
            played = wins + draws + losses
            out[policy] = {
                "elo": rec.elo,
                "opponent": rec.opponent,
                "opponent_elo": rec.opponent_elo,
                "games": played,
                "win_rate": wins / played if played else math.nan,
                "draw_rate": draws / played if played else math.nan,
                "loss_rate": losses / played if played else math.nan,
                "pool_size": len(rec.pool),
                "snapshots_taken": rec.snapshots_taken,
                "learning_steps": rec.steps,
                "opponent_steps": rec.opponent_steps,
            }
        return out


class SelfPlayLedger(TorchRLModule):
    """The learner-only module that keeps the :class:`Ledger` and the pool's weights; it never acts."""

    def setup(self) -> None:
        # Learners build an optimizer for every module they can; one with no parameters is an error.
        self.placeholder = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        self.ledger: str = ""  # Ledger JSON; "" until the first iteration's set-up
        self.pool: dict[str, dict[str, Any]] = {}  # policy -> snapshot id (str) -> module state

    def get_state(  # the state is JSON plus weights, not a torch state_dict
        self, components: Any = None, *, not_components: Any = None, inference_only: bool = False, **_: Any
    ) -> dict[str, Any]:
        if inference_only:  # what weight syncs to env runners would carry: not the pool
            return {"ledger": self.ledger}
        return {"ledger": self.ledger, "pool": self.pool}

    def set_state(self, state: dict[str, Any]) -> None:
        self.ledger = state.get("ledger", "")
        if "pool" in state:
            self.pool = {p: dict(snaps) for p, snaps in state["pool"].items()}

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        raise RuntimeError("the self-play ledger module keeps snapshots and ratings; it does not act")


# ---- learner-side steps (run on every learner, local or remote) ----------------------------------------


def _read_ledger(learner: Any) -> str:
    ledger: SelfPlayLedger = learner.module[LEDGER]
    return ledger.ledger


def _write_ledger(learner: Any, *, ledger: str, snapshot: list[str], swap: dict[str, int]) -> None:
    """Store the ledger, copy new snapshots into the pool, and load the opponents' new weights."""
    book: SelfPlayLedger = learner.module[LEDGER]
    book.ledger = ledger
    records = Ledger.from_json(ledger).policies
    for policy in snapshot:
        taken = records[policy]
        pool = book.pool.setdefault(policy, {})
        pool[str(taken.snapshots_taken - 1)] = copy.deepcopy(learner.module[policy].get_state())
        keep = {str(int(s["id"])) for s in taken.pool}
        for old in [k for k in pool if k not in keep]:
            del pool[old]
    for policy, snapshot_id in swap.items():
        weights = (
            learner.module[policy].get_state()
            if snapshot_id == LATEST
            else book.pool[policy][str(snapshot_id)]
        )
        learner.module[opponent_of(policy)].set_state(copy.deepcopy(weights))


def _on_learners(algorithm: Any, func: Callable[..., Any], **kwargs: Any) -> list[Any]:
    results = algorithm.learner_group.foreach_learner(functools.partial(func, **kwargs))
    return [r.get() for r in results]


# ---- env-runner-side steps -------------------------------------------------------------------------


def _set_learning_team(env_runner: Any, team: int) -> None:
    mapping = env_runner.config.policy_mapping_fn
    if isinstance(mapping, SelfPlayMapping):
        mapping.learning_team = team


def episode_games(episode: Any) -> dict[str, float]:
    """Policy -> its learning side's result in a finished multi-agent episode (1 win, 0.5 draw, 0 loss).

    A game counts only when an opponent module played in the episode too (its own in a symmetric
    game, another policy's in an asymmetric one).
    """
    finals: dict[str, float] = {}
    opposed = False
    for agent_id, agent_episode in episode.agent_episodes.items():
        module = str(episode.module_for(agent_id))
        if module.endswith(OPPONENT):
            opposed = True
        elif module != LEDGER and len(agent_episode) > 0:
            finals[module] = finals.get(module, 0.0) + float(agent_episode.get_rewards(-1))
    return {policy: game_result(total) for policy, total in finals.items()} if opposed else {}


@reads_the_episode_only
def log_games(*, episode: Any, metrics_logger: Any = None, **_: Any) -> None:
    """``on_episode_end`` in every env runner: count the finished game for the driver's ELO."""
    if metrics_logger is None or not hasattr(episode, "agent_episodes"):
        return
    for policy, result in episode_games(episode).items():
        metrics_logger.log_value((RESULTS, policy, GAME_KEYS[result]), 1, reduce="sum")


# ---- driver-side steps -------------------------------------------------------------------------------


def _on_runners(algorithm: Any, hook: Callable[[Any], None]) -> None:
    """Call ``hook`` on every env runner, training and evaluation, local and remote."""
    for group in (algorithm.env_runner_group, getattr(algorithm, "eval_env_runner_group", None)):
        if group is not None:
            group.foreach_env_runner(hook, local_env_runner=True)


def _broadcast_team(algorithm: Any, team: int) -> None:
    _on_runners(algorithm, functools.partial(_set_learning_team, team=team))


def _set_modules(env_runner: Any, states: dict[str, Any]) -> None:
    for module_id, state in states.items():
        if module_id in env_runner.module:
            env_runner.module[module_id].set_state(state)


def _sync_opponents(algorithm: Any, policies: Iterable[str]) -> None:
    """The opponents' weights from the learner to every env runner.

    Not ``sync_weights``: an env runner skips weights whose sequence number it has seen, and the
    learner's number moves only when it trains, so a swap after that iteration's sync would be lost.
    """
    modules = [opponent_of(p) for p in policies]
    if not modules:
        return
    paths = [f"{COMPONENT_LEARNER}/{COMPONENT_RL_MODULE}/{m}" for m in modules]
    state = algorithm.learner_group.get_state(components=paths, inference_only=True)
    _on_runners(
        algorithm, functools.partial(_set_modules, states=state[COMPONENT_LEARNER][COMPONENT_RL_MODULE])
    )


def start(
    *, algorithm: Any, settings: SelfPlaySettings, policy_teams: dict[str, list[int]], **_: Any
) -> None:
    """``on_algorithm_init``: a fresh run's snapshot 0 (the initial weights) is every opponent's start."""
    if not _on_learners(algorithm, _read_ledger)[0]:  # else an earlier on_algorithm_init hook loaded one
        ledger = Ledger.new(settings, policy_teams)
        start_at = dict.fromkeys(policy_teams, 0)
        _on_learners(
            algorithm, _write_ledger, ledger=ledger.to_json(), snapshot=list(policy_teams), swap=start_at
        )
    resend_to_runners(algorithm=algorithm)


def resend_to_runners(*, algorithm: Any, **_: Any) -> None:
    """``on_checkpoint_loaded`` and ``on_env_runners_recreated``: the learning team and the opponents'
    weights, from the learner's ledger, to every env runner.

    After a restore RLlib syncs weights itself, but a runner skips weights whose sequence number is
    not ahead of its own, so they are sent here as a swap sends them.
    """
    text = _on_learners(algorithm, _read_ledger)[0]
    if text:
        ledger = Ledger.from_json(text)
        _sync_opponents(algorithm, ledger.policies)
        _broadcast_team(algorithm, ledger.learning_team)


def _count(value: Any) -> int:
    """A summed metric of the iteration: RLlib reports NaN for a key that got no value this time."""
    return 0 if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def after_iteration(
    *, algorithm: Any, result: dict[str, Any], settings: SelfPlaySettings, seed: int, **_: Any
) -> None:
    """``on_train_result``: ELO from the iteration's games, then snapshots, team change and swaps."""
    ledger = Ledger.from_json(_on_learners(algorithm, _read_ledger)[0])
    runners = result.get("env_runners") or {}
    counted = runners.get(RESULTS) or {}
    module_steps = runners.get("num_module_steps_sampled") or {}
    games: dict[str, tuple[int, int, int]] = {}
    steps: dict[str, tuple[int, int]] = {}
    for policy in ledger.policies:
        mine = counted.get(policy) or {}
        wins, draws, losses = (_count(mine.get(GAME_KEYS[r])) for r in (WIN, DRAW, LOSS))
        games[policy] = (wins, draws, losses)
        ledger.play(policy, interleaved(wins, draws, losses))
        steps[policy] = (
            _count(module_steps.get(policy)),
            _count(module_steps.get(opponent_of(policy))),
        )
    result[RESULTS] = ledger.metrics(games)  # the state this iteration's games were played in
    rng = np.random.default_rng([seed, int(result.get("training_iteration") or 0)])
    team_before = ledger.learning_team
    snapshot, swap = ledger.advance(settings, steps, rng)
    _on_learners(algorithm, _write_ledger, ledger=ledger.to_json(), snapshot=snapshot, swap=swap)
    _sync_opponents(algorithm, swap)
    if ledger.learning_team != team_before:
        _broadcast_team(algorithm, ledger.learning_team)


# ---- the config -------------------------------------------------------------------------------------


def _ledger_spec(space: tuple[gym.Space, gym.Space]) -> RLModuleSpec:
    return RLModuleSpec(
        module_class=SelfPlayLedger, observation_space=space[0], action_space=space[1], learner_only=True
    )


def configure(
    config: Any,
    settings: SelfPlaySettings,
    assign: RoleAndTeam | Callable[[Any], tuple[str, int]],
    agent_spaces: dict[Any, tuple[gym.Space, gym.Space]],
    base_spec: RLModuleSpec | None,
    seed: int,
    where: str = "self_play",
) -> dict[str, list[int]]:
    """Set ``config`` up for self-play over the env's agents; returns each trained policy's teams.

    ``agent_spaces``: the env's agents (its possible agents, and those of its first observation) and
    their spaces.  ``where``: the YAML's place for errors in the settings.
    """
    roles: dict[str, tuple[gym.Space, gym.Space]] = {}
    teams: dict[str, set[int]] = {}
    for agent, spaces in agent_spaces.items():
        policy, team = assign(agent)
        if policy in roles and roles[policy] != spaces:
            raise UserError(
                f"self_play: agents of policy '{policy}' have different spaces",
                "map agents with other spaces to another policy (policy_mapping_fn)",
            )
        if is_self_play_module(policy):
            raise UserError(
                f"self_play: policy id '{policy}' is reserved", f"rename it (no '{OPPONENT}' ending)"
            )
        roles[policy] = spaces
        teams.setdefault(policy, set()).add(team)
    all_teams = sorted(set().union(*teams.values()))
    if len(all_teams) < 2:
        raise UserError(
            f"self_play: every agent of the env plays for team {all_teams[0]}; self-play needs two teams",
            "give teams: self_play.teams (e.g. {'red_*': 0, 'blue_*': 1}), or the env's own",
        )
    policies = sorted(roles)
    settings.check_policy_ids(policies, where)
    settings.check_team_change(teams, where)
    policy_teams = {p: sorted(teams[p]) for p in policies}
    spec_of = base_spec if base_spec is not None else config.get_default_rl_module_spec()
    module_specs: dict[str, RLModuleSpec] = {}
    specs: dict[str, PolicySpec] = {}
    for policy, (obs, act) in roles.items():
        for module in (policy, opponent_of(policy)):
            one = copy.deepcopy(spec_of)
            one.observation_space, one.action_space = obs, act
            module_specs[module] = one
            specs[module] = PolicySpec(None, obs, act)
    module_specs[LEDGER] = _ledger_spec(next(iter(roles.values())))
    config.multi_agent(
        policies=specs,
        policy_mapping_fn=SelfPlayMapping(assign, learning_team=all_teams[0]),
        policies_to_train=policies,
    )
    config.rl_module(rl_module_spec=MultiRLModuleSpec(rl_module_specs=module_specs))
    add_callback(
        config,
        "on_algorithm_init",
        functools.partial(start, settings=settings, policy_teams=policy_teams),
    )
    add_callback(config, "on_checkpoint_loaded", resend_to_runners)
    add_callback(config, "on_env_runners_recreated", resend_to_runners)
    add_callback(config, "on_episode_end", log_games)
    add_callback(config, "on_train_result", functools.partial(after_iteration, settings=settings, seed=seed))
    return policy_teams


def env_teams(env_class: Any, env_config: dict[str, Any]) -> Callable[[Any], tuple[str, int]] | None:
    """The env's own ``self_play_teams(env_config)``, on any class that has one (not only ours)."""
    declared = getattr(env_class, "self_play_teams", None)
    return declared(env_config) if callable(declared) else None


def assignment(
    settings: SelfPlaySettings,
    env_teams: Callable[[Any], tuple[str, int]] | None,
    policy_of: Any,
    agents: list[Any],
) -> Any:
    """Agent -> (policy, team): the YAML's ``teams`` (with the run's policy mapping) over the env's own;
    with neither, a two-agent env whose agents share one policy puts each agent on a team of its own
    (a board game's two players).  ``agents``: the env's (possible) agents, in its order."""
    if settings.teams:
        return RoleAndTeam(TeamsByName(dict(settings.teams)), policy_of)
    if env_teams is not None:
        return env_teams
    if len(agents) == 2:
        by_order = RoleAndTeam(TeamsByName({str(a): i for i, a in enumerate(agents)}), policy_of)
        if by_order(agents[0])[0] == by_order(agents[1])[0]:
            notice(
                f"self-play teams: '{agents[0]}' is team 0, '{agents[1]}' team 1 (self_play.teams to change)"
            )
            return by_order
    raise UserError(
        "self_play needs each agent's team: the env declares none",
        "add self_play.teams (agent id or glob -> team), or give the env a self_play_teams() classmethod",
    )
