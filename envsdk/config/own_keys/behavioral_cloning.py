"""The ``behavioral_cloning:`` config key: mlagents-learn's behavioral cloning beside RL, read and
checked before anything starts.

    config:
      behavioral_cloning: {demo_path: demos/Expert.demo, strength: 0.5, steps: 150000}
      algorithm_config_overrides_per_module:
        striker: {behavioral_cloning: {demo_path: demos/Striker.demo}}   # one policy's own

The keys, defaults and types are mlagents-learn's (:mod:`envsdk.config.mlagents.schema`); ``num_epoch``
and ``batch_size`` default to the run's ``num_epochs`` and ``minibatch_size``, as ML-Agents' default
to its trainer's.  What cloning does is :mod:`envsdk.training.substitutes.ppo.cloning`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envsdk.config.mlagents import schema
from envsdk.config.own_keys.reward_signals import PER_MODULE, demo_path
from envsdk.config.yamlio import LineDict, where_of
from envsdk.errors import UserError

KEY = "behavioral_cloning"
EVERY_POLICY = "*"


@dataclass(frozen=True)
class Cloning:
    """One policy's cloning settings, every default filled in."""

    demo_path: str
    strength: float
    steps: int
    samples_per_update: int
    num_epoch: int
    batch_size: int

    def to_config(self) -> dict[str, Any]:
        """Plain values for the learner's config (checkpoints pickle it)."""
        return asdict(self)


def parse(
    value: Any, where: str, epochs: int, batch: int, section: str = KEY, base: Path | None = None
) -> Cloning:
    """The YAML mapping -> settings; a wrong key, type or value is a UserError naming its line."""
    settings = schema.checked(value, schema.BEHAVIORAL_CLONING, section, where)
    path = demo_path(settings["demo_path"], base, where, f"{section}.demo_path")
    if path is None:
        raise UserError(f"{where}: {section} needs demo_path", "give the .demo file (or folder) to imitate")
    for key in ("steps", "samples_per_update", "num_epoch", "batch_size"):
        if settings[key] is not None and settings[key] < 0:
            raise UserError(f"{where}: {section}.{key} is {settings[key]}", "give 0 or more")
    if settings["strength"] < 0:
        raise UserError(f"{where}: {section}.strength is {settings['strength']}", "give 0 or more")
    return Cloning(
        demo_path=path,
        strength=float(settings["strength"]),
        steps=int(settings["steps"]),
        samples_per_update=int(settings["samples_per_update"]),
        num_epoch=int(settings["num_epoch"] or epochs),
        batch_size=int(settings["batch_size"] or batch),
    )


def take(values: LineDict, epochs: int, batch: int, base: Path | None = None) -> dict[str, Cloning | None]:
    """Pop ``behavioral_cloning`` from ``values`` and from each policy's entry of
    ``algorithm_config_overrides_per_module``: policy (:data:`EVERY_POLICY`: the run's) -> its
    settings (None: a policy's own ``behavioral_cloning: null``, no cloning)."""
    epochs = int(values.get("num_epochs", epochs))
    batch = int(values.get("minibatch_size") or values.get("sgd_minibatch_size") or batch)
    plan: dict[str, Cloning | None] = {}
    if KEY in values:
        where = values.where(KEY)
        plan[EVERY_POLICY] = parse(values.pop(KEY), where, epochs, batch, base=base)
    overrides = values.get(PER_MODULE)
    for policy, entry in overrides.items() if isinstance(overrides, Mapping) else ():
        if isinstance(entry, dict) and KEY in entry:
            at = where_of(entry, KEY, values.where(PER_MODULE))
            given = entry.pop(KEY)
            section = f"{PER_MODULE}.{policy}.{KEY}"
            plan[str(policy)] = None if given is None else parse(given, at, epochs, batch, section, base)
    return plan


def of(plan: Mapping[str, Cloning | None], policy: str) -> Cloning | None:
    """One policy's cloning: its own, else the run's."""
    return plan[policy] if policy in plan else plan.get(EVERY_POLICY)
