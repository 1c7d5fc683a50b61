"""mlagents-learn's pre-1.0 trainer configs, read as ``mlagents-upgrade-config`` converts them.

Two older forms, which mlagents-learn 1.x refuses:

* up to 0.16: behavior names at the top level (and ``default:``), each with ``trainer: ppo`` and
  flat keys (``batch_size``, ``hidden_units``, ``use_recurrent`` ...);
* 0.17 and 0.18: ``behaviors:`` (some copies with the flat keys still under it), with
  ``curriculum:`` (per behavior: ``measure``, ``thresholds``, ``min_lesson_length``,
  ``signal_smoothing``, a list of values per parameter) and ``parameter_randomization:`` (samplers
  with flat keys) beside it.

:func:`upgrade` returns the 1.x form, with one notice; a flat key that has no place in it is named.
"""

from __future__ import annotations

from typing import Any

from envsdk.config.mlagents.schema import HYPERPARAMETERS, NETWORK, TRAINER
from envsdk.config.yamlio import LineDict
from envsdk.errors import UserError
from envsdk.notices import notice

SAMPLER_KEYS = ("seed", "min_value", "max_value", "mean", "st_dev", "intervals")
RECURRENT = ("use_recurrent", "sequence_length", "memory_size")


def is_pre_1_0(data: Any) -> bool:
    """Whether ``data`` is one of the two older forms."""
    if not isinstance(data, dict):
        return False
    if isinstance(data.get("behaviors"), dict):
        flat = any(isinstance(v, dict) and "trainer" in v for v in data["behaviors"].values())
        return flat or "curriculum" in data or "parameter_randomization" in data
    return any(isinstance(v, dict) and "trainer" in v for v in data.values())


def upgrade(data: LineDict) -> LineDict:
    """The 1.x form of an older file (as ``mlagents-upgrade-config`` writes it)."""
    notice(
        f"{data.source}: mlagents-learn's pre-1.0 trainer config, read as mlagents-upgrade-config"
        " converts it (mlagents-learn 1.x refuses it)"
    )
    out = LineDict(data) if "behaviors" in data else LineDict(behaviors=_behaviors(data))
    out.source, out.lines = data.source, dict(data.lines)
    if "behaviors" not in data:
        return out
    if any(isinstance(v, dict) and "trainer" in v for v in data["behaviors"].values()):
        out["behaviors"] = _behaviors(data["behaviors"])  # flat keys under behaviors: (0.17's copies)
    samplers = _samplers(dict(out.pop("parameter_randomization", None) or {}))
    out["environment_parameters"] = _with_curriculum(samplers, dict(out.pop("curriculum", None) or {}))
    return out


def _behaviors(data: LineDict) -> LineDict:
    default = dict(data.get("default") or {})
    out = LineDict()
    out.source, out.lines = data.source, dict(data.lines)
    for name, flat in data.items():
        if name == "default":
            continue
        merged = {**default, **dict(flat)}
        if "trainer" not in merged:
            raise UserError(f"{data.where(name)}: behavior '{name}' has no 'trainer:'", "add 'trainer: ppo'")
        out[name] = _behavior(str(name), merged)
    return out


def _behavior(name: str, flat: dict[str, Any]) -> dict[str, Any]:
    kind = flat.pop("trainer")
    if kind not in HYPERPARAMETERS:
        raise UserError(
            f"behavior '{name}': trainer '{kind}' is not one mlagents-learn had", "use ppo or sac"
        )
    new: dict[str, Any] = {"trainer_type": kind}
    new["hyperparameters"] = {k: flat[k] for k in HYPERPARAMETERS[kind] if k in flat}
    new["network_settings"] = {k: flat[k] for k in NETWORK if k in flat and k != "memory"}
    if flat.get("use_recurrent"):
        new["network_settings"]["memory"] = {
            k: flat[k] for k in ("sequence_length", "memory_size") if k in flat
        }
    for key, value in flat.items():
        if key in TRAINER and key != "trainer_type":
            new[key] = int(float(value)) if key == "max_steps" else value
    used = set(new["hyperparameters"]) | set(new["network_settings"]) | set(new) | set(RECURRENT)
    dropped = sorted(set(flat) - used)
    if dropped:
        notice(
            f"behavior '{name}': pre-1.0 keys with no place in mlagents-learn 1.x, dropped as its"
            f" upgrade drops them: {', '.join(dropped)}"
        )
    return new


def _samplers(old: dict[str, Any]) -> dict[str, Any]:
    """``parameter_randomization`` as 1.x samplers (``sampler-type`` or ``sampler_type``, flat keys)."""
    old.pop("resampling-interval", None)
    out: dict[str, Any] = {}
    for name, sampler in old.items():
        sampler = dict(sampler)
        kind = sampler.pop("sampler-type", None) or sampler.pop("sampler_type", None)
        params = dict(sampler.pop("sampler_parameters", None) or {})
        params.update({k: sampler.pop(k) for k in SAMPLER_KEYS if k in sampler})
        out[name] = {"sampler_type": kind, "sampler_parameters": params}
    return out


def _with_curriculum(parameters: dict[str, Any], curriculum: dict[str, Any]) -> dict[str, Any]:
    """Each behavior's old curriculum as lessons of each of its parameters (a sampler wins)."""
    for behavior, old in curriculum.items():
        thresholds = list(old["thresholds"])
        for name, values in dict(old["parameters"]).items():
            if name in parameters:
                notice(
                    f"parameter {name} has a sampler and a curriculum: the curriculum is ignored,"
                    " as mlagents-upgrade-config ignores it"
                )
                continue
            lessons = [
                {
                    "name": f"Lesson{i}",
                    "completion_criteria": {
                        "measure": old["measure"],
                        "behavior": behavior,
                        "signal_smoothing": old.get("signal_smoothing", False),
                        "min_lesson_length": old.get("min_lesson_length", 1),
                        "threshold": threshold,
                    },
                    "value": values[i],
                }
                for i, threshold in enumerate(thresholds)
            ]
            lessons.append({"name": f"Lesson{len(thresholds)}", "value": values[len(thresholds)]})
            parameters[name] = {"curriculum": lessons}
    return parameters
