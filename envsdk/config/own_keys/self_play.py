"""The ``self_play:`` config key: every setting, its default, type and check, in one place.

    config:
      self_play:
        save_steps: 20000        # a snapshot of the learning policy every N of its agent steps
        team_change: 100000      # the learning team changes every N of its agent steps (5 x save_steps)
        swap_steps: 2000         # the opponent snapshot changes every N of the opponents' agent steps
        window: 10               # the last N snapshots are the candidate opponents
        play_against_latest_model_ratio: 0.5
        initial_elo: 1200
        teams: {"player_0": 0, "player_1": 1}   # agent id (or glob) -> team; else the env says
        policies:                # a policy's own settings over the ones above (not teams)
          Goalie: {swap_steps: 1000}

The names and defaults are ML-Agents' ``SelfPlaySettings``; ``policies`` holds
what ML-Agents' per-behavior ``self_play`` blocks give one behavior (an
asymmetric game's teams play different policies).  ``self_play: true`` takes
every default.  What the settings do is in :mod:`envsdk.training.hooks.self_play`.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from envsdk.config.yamlio import settings_from
from envsdk.errors import UserError, did_you_mean

ML_AGENTS_TEAM_CHANGE_FACTOR = 5  # team_change defaults to 5 x save_steps
SHARED_KEYS = ("teams", "policies")  # settings of the whole run, not of one policy


@dataclass(frozen=True)
class _PolicyKeys:
    """The keys a ``self_play.policies`` entry may set: every setting but :data:`SHARED_KEYS`."""

    save_steps: int | None = None
    team_change: int | None = None
    swap_steps: int | None = None
    window: int | None = None
    play_against_latest_model_ratio: float | None = None
    initial_elo: float | None = None


@dataclass(frozen=True)
class SelfPlaySettings:
    """One ``self_play:`` block (docs/self-play.md has each key)."""

    save_steps: int = 20000
    team_change: int | None = None  # None: ML_AGENTS_TEAM_CHANGE_FACTOR x save_steps
    swap_steps: int = 2000
    window: int = 10
    play_against_latest_model_ratio: float = 0.5
    initial_elo: float = 1200.0
    teams: dict[str, int] = field(default_factory=dict)  # agent id or glob -> team id
    policies: dict[str, dict[str, Any]] = field(default_factory=dict)  # policy id -> its own settings

    @property
    def team_change_steps(self) -> int:
        return (
            self.team_change
            if self.team_change is not None
            else ML_AGENTS_TEAM_CHANGE_FACTOR * self.save_steps
        )

    @classmethod
    def parse(cls, value: Any, where: str) -> SelfPlaySettings:
        """The YAML value (a mapping, or ``true`` for the defaults) -> settings; errors name ``where``."""
        if value is True:
            return cls()
        if not isinstance(value, dict):
            raise UserError(
                f"{where}: self_play must be a mapping of settings (or true for ML-Agents' defaults),"
                f" got {value!r}",
                "e.g. self_play: {save_steps: 20000, swap_steps: 2000, window: 10}",
            )
        settings: SelfPlaySettings = settings_from(cls, value, where, "self_play")
        settings.check_values(where, "self_play")
        settings._check_policies(where)
        return settings

    def of(self, policy: str) -> SelfPlaySettings:
        """One policy's settings: its ``policies`` entry over the defaults."""
        return dataclasses.replace(self, policies={}, **self.policies.get(policy, {}))

    def check_policy_ids(self, trained: Iterable[str], where: str) -> None:
        """Every ``policies`` entry names a policy that self-play trains."""
        known = sorted(trained)
        for policy in self.policies:
            if policy not in known:
                raise UserError(
                    f"{where}: self_play policies: '{policy}' is no policy of this run's self-play",
                    did_you_mean(str(policy), known) or f"its policies: {', '.join(known)}",
                )

    def check_team_change(self, teams_of: Mapping[str, Iterable[int]], where: str) -> None:
        """One team_change per team: ML-Agents' controller changes the learning team when the trainer of
        any behavior on it has learned for its own team_change steps, so two behaviors that learn at the
        same time with different values would each end the turn at their own count (and turn it twice).
        ``teams_of``: policy -> the teams its agents are on."""
        first_on: dict[int, str] = {}
        for policy in sorted(teams_of):
            for team in sorted(teams_of[policy]):
                other = first_on.setdefault(team, policy)
                mine, theirs = self.of(policy).team_change_steps, self.of(other).team_change_steps
                if mine != theirs:
                    raise UserError(
                        f"{where}: self_play team_change: policies '{other}' ({theirs}) and '{policy}'"
                        f" ({mine}) both play for team {team}, so they learn at the same time, and a"
                        " team learns for one team_change",
                        f"give '{other}' and '{policy}' the same team_change (self_play.policies)",
                    )

    def _check_policies(self, where: str) -> None:
        if not isinstance(self.policies, Mapping):
            raise UserError(
                f"{where}: self_play policies must be a mapping of policy id to its settings,"
                f" got {self.policies!r}",
                "e.g. self_play: {policies: {Goalie: {swap_steps: 1000}}}",
            )
        for policy, own in self.policies.items():
            section = f"self_play policies.{policy}"
            if not isinstance(own, Mapping):
                raise UserError(
                    f"{where}: {section} must be a mapping of settings, got {own!r}",
                    "e.g. {save_steps: 50000, swap_steps: 1000}",
                )
            shared = [k for k in SHARED_KEYS if k in own]
            if shared:
                raise UserError(
                    f"{where}: {section}: {shared[0]} is a setting of the whole run, not of one policy",
                    f"move it up to self_play.{shared[0]}",
                )
            settings_from(_PolicyKeys, dict(own), where, section)
            self.of(policy).check_values(where, section)

    def check_values(self, where: str, section: str) -> None:
        """Each setting's type and range; ``section`` names the block (``self_play policies.Goalie``)."""

        def bad(key: str, need: str) -> UserError:
            return UserError(f"{where}: {section} {key} must be {need}, got {getattr(self, key)!r}", "")

        for key in ("save_steps", "swap_steps", "window", "team_change"):
            value = getattr(self, key)
            if value is None and key == "team_change":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise bad(key, "a positive integer")
        ratio = self.play_against_latest_model_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0.0 <= ratio <= 1.0:
            raise bad("play_against_latest_model_ratio", "a number from 0 to 1")
        if isinstance(self.initial_elo, bool) or not isinstance(self.initial_elo, int | float):
            raise bad("initial_elo", "a number")
        if not isinstance(self.teams, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool)
            for k, v in self.teams.items()
        ):
            raise bad("teams", "a mapping of agent id (or glob such as 'blue_*') to an integer team")
        if self.teams and len(set(self.teams.values())) < 2:
            raise bad("teams", "a mapping with at least two teams")


@dataclass(frozen=True)
class TeamsByName:
    """Agent id -> team from ``self_play.teams``: an exact id first, then the first glob that matches."""

    teams: dict[str, int]

    def __call__(self, agent_id: Any) -> int:
        name = str(agent_id)
        if name in self.teams:
            return self.teams[name]
        for pattern, team in self.teams.items():
            if fnmatch.fnmatchcase(name, pattern):
                return team
        raise UserError(
            f"self_play teams: agent '{name}' matches no entry of {sorted(self.teams)}",
            "add its id (or a glob such as 'blue_*') to self_play.teams",
        )
