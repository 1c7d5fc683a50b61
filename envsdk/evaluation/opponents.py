"""``rollout.py --opponent latest|random|snapshot:N``: whom a self-play checkpoint's policies play.

The checkpoint's learning team plays its trained policy ``P``; every other
team plays ``P@opponent``, whose weights this module replaces before the
first episode:

* ``latest``: the trained weights themselves (the policy against itself);
* ``random``: uniform random actions (masked actions are never drawn);
* ``snapshot:N``: snapshot N of the run's pool, as kept in the checkpoint.

Each finished episode is a game, read as training reads it
(:func:`envsdk.training.hooks.self_play.episode_games`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch
import tree
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.core.rl_module.torch.torch_rl_module import TorchRLModule

from envsdk.envs.base import MASK_KEY
from envsdk.errors import UserError
from envsdk.training.hooks.self_play import (
    LATEST,
    LEDGER,
    OPPONENT,
    Ledger,
    SelfPlayLedger,
    SelfPlayMapping,
    opponent_of,
)

CHOICES = "latest, random or snapshot:N"
# What a refusal is about (its subject); the command line says it again under its flag.
CHOICE = "opponent"
TEAM = "team"


@dataclass(frozen=True)
class Opponent:
    kind: str  # "latest" | "random" | "snapshot"
    snapshot: int = LATEST
    team: int | None = None  # the trained policy's team (--team); None: the checkpoint's learning team

    def __str__(self) -> str:
        return f"snapshot {self.snapshot}" if self.kind == "snapshot" else self.kind


LATEST_WEIGHTS = Opponent("latest")  # what a self-play checkpoint's other teams play unless told


def parse(text: str) -> Opponent:
    match = re.fullmatch(r"(latest|random|snapshot:(\d+))", text.strip())
    if not match:
        raise UserError(f"{text!r} is not an opponent", f"choose {CHOICES}", CHOICE)
    if match.group(2) is not None:
        return Opponent("snapshot", int(match.group(2)))
    return Opponent(match.group(1))


def self_play_policies(module_dir: Path) -> list[str]:
    """The policies a checkpoint trained by self-play (empty for any other checkpoint)."""
    if not (module_dir / LEDGER).is_dir():
        return []
    return sorted(p.name[: -len(OPPONENT)] for p in module_dir.iterdir() if p.name.endswith(OPPONENT))


def _pool(module_dir: Path) -> dict[str, dict[str, Any]]:
    ledger = RLModule.from_checkpoint(module_dir / LEDGER)
    assert isinstance(ledger, SelfPlayLedger)
    return ledger.pool


def _teams(module_dir: Path) -> list[int]:
    ledger = RLModule.from_checkpoint(module_dir / LEDGER)
    assert isinstance(ledger, SelfPlayLedger)
    return list(Ledger.from_json(ledger.ledger).teams) if ledger.ledger else []


def chosen(text: str | None, module_dir: Path, team: int | None = None) -> Opponent | None:
    """``--opponent`` (and ``--team``) for this checkpoint: None unless it was trained by self-play,
    else the choice (LATEST_WEIGHTS when none was given); a choice it cannot give is refused before
    any env starts."""
    opponent = parse(text) if text is not None else None
    policies = self_play_policies(module_dir)
    if opponent is None and team is None:
        return LATEST_WEIGHTS if policies else None
    if not policies:
        raise UserError(
            "this checkpoint was not trained with self_play",
            "drop it (every agent plays its own policy)",
            CHOICE if opponent is not None else TEAM,
        )
    opponent = replace(opponent or LATEST_WEIGHTS, team=team)
    if team is not None and team not in (teams := _teams(module_dir)):
        raise UserError(f"no team {team}: the checkpoint's teams are {teams}", f"choose one of {teams}", TEAM)
    if opponent.kind == "snapshot":
        pool = _pool(module_dir)
        for policy in policies:
            ids = sorted(int(i) for i in pool.get(policy, {}))
            if str(opponent.snapshot) not in pool.get(policy, {}):
                raise UserError(
                    f"no snapshot {opponent.snapshot}: policy '{policy}' keeps snapshots {ids}",
                    "pick one of those (the pool keeps the last `window` snapshots)",
                    CHOICE,
                )
    return opponent


class RandomModule(TorchRLModule):
    """Uniform random actions in the module's action space; an action mask in the observation is honoured."""

    def setup(self) -> None:
        assert self.action_space is not None
        self.space: gym.Space = self.action_space
        self.space.seed(0)

    def _sample(self, mask: np.ndarray | None) -> Any:
        space = self.space
        if mask is None:
            return space.sample()
        if isinstance(space, gym.spaces.Discrete):
            return space.sample(mask=mask.astype(np.int8))
        if isinstance(space, gym.spaces.MultiDiscrete):
            parts = np.split(mask.astype(np.int8), np.cumsum(space.nvec)[:-1])
            return space.sample(mask=tuple(parts))
        return space.sample()

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        masks = obs.get(MASK_KEY) if isinstance(obs, dict) else None
        size = len(tree.flatten(obs)[0])
        rows = [
            self._sample(
                None if masks is None else np.asarray(masks[i].cpu() if torch.is_tensor(masks) else masks[i])
            )
            for i in range(size)
        ]
        actions = tree.map_structure(lambda *xs: np.stack([np.asarray(x) for x in xs]), *rows)
        return {Columns.ACTIONS: actions}


def apply(runner: Any, opponent: Opponent, module_dir: Path) -> list[str]:
    """Give every ``P@opponent`` of ``runner`` the chosen weights (or random play), and the trained
    policies the chosen team; returns the policies."""
    policies = self_play_policies(module_dir)
    mapping = runner.config.policy_mapping_fn
    if opponent.team is not None and isinstance(mapping, SelfPlayMapping):
        mapping.learning_team = opponent.team
    pool = _pool(module_dir) if opponent.kind == "snapshot" else {}
    for policy in policies:
        mid = opponent_of(policy)
        if mid not in runner.module:
            continue
        current = runner.module[mid]
        if opponent.kind == "random":
            random = RandomModule(
                observation_space=current.observation_space,
                action_space=current.action_space,
                model_config={},
            )
            runner.module.add_module(mid, random, override=True)
        elif opponent.kind == "latest":
            current.set_state(runner.module[policy].get_state())
        else:
            current.set_state(pool[policy][str(opponent.snapshot)])
    return policies
