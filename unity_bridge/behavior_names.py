"""ML-Agents' behavior names: ``Name?team=N`` and the policy id a behavior trains.

mlagents-learn keys its trainer settings by the name without the team (every team of a behavior
is one brain), and so do our policy ids, which are also safe folder names.
"""

from __future__ import annotations

import re


def default_policy_id(behavior: str) -> str:
    """A policy id that is also a safe folder name: 'Dodgeball?team=0' -> 'Dodgeball_team_0'."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", behavior).strip("_") or "policy"


def team_of(behavior: str) -> int:
    """ML-Agents' team id: ``Name?team=N`` -> N (0 when the behavior has none)."""
    match = re.search(r"\?team=(\d+)$", behavior)
    return int(match.group(1)) if match else 0


def behavior_name(behavior: str) -> str:
    """The behavior without its team: ``Dodgeball?team=1`` -> ``Dodgeball``."""
    return re.sub(r"\?team=\d+$", "", behavior)
