"""Environment-parameter samplers in mlagents-learn's form: read, checked, seeded, drawn.

An environment parameter is a number or a sampler.  mlagents-learn writes a sampler as::

    mass: {sampler_type: uniform, sampler_parameters: {min_value: 0.5, max_value: 10, seed: 3}}

with ``gaussian`` (``mean``, ``st_dev``) and ``multirangeuniform`` (``intervals: [[a, b], ...]``)
beside ``uniform`` (``min_value``, ``max_value``), and ``constant`` (``value``) for a number.  The
keys, defaults and checks are those of mlagents 1.1.0's ``trainers/settings.py``
(``UniformSettings``, ``GaussianSettings``, ``MultiRangeUniformSettings``, ``ConstantSettings``).
A sampler goes to the game as a sampler (``side_channels.sampler_parameter``) and the game draws a
fresh value each time it reads the parameter, typically once per episode (Unity's
``EnvironmentParameters.GetWithDefault``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from unity_bridge.errors import SettingsError

UNIFORM, GAUSSIAN, MULTIRANGE, CONSTANT = "uniform", "gaussian", "multirangeuniform", "constant"

# sampler_type -> its sampler_parameters and their defaults (mlagents 1.1.0), seed aside.
_PARAMETERS: dict[str, dict[str, Any]] = {
    UNIFORM: {"min_value": 0.0, "max_value": 1.0},
    GAUSSIAN: {"mean": 1.0, "st_dev": 1.0},
    MULTIRANGE: {"intervals": [[0.0, 1.0]]},
    CONSTANT: {"value": 0.0},
}
NOT_SET = -1  # mlagents-learn's "no seed": it assigns one from the run's seed (with_seeds)
_EXAMPLE = "{sampler_type: uniform, sampler_parameters: {min_value: 0.5, max_value: 10}}"


@dataclass(frozen=True)
class Sampler:
    """A sampler as the game receives it: ``values`` are (min, max), (mean, st_dev), or the
    multirange intervals flattened (a0, b0, a1, b1, ...), as on the wire."""

    kind: str  # "uniform" | "gaussian" | "multirangeuniform"
    values: tuple[float, ...]
    seed: int = NOT_SET

    @property
    def intervals(self) -> list[tuple[float, float]]:
        return list(zip(self.values[::2], self.values[1::2], strict=True))

    def draw(self, rng: np.random.Generator) -> float:
        """One value, as Unity's SamplerFactory draws it; a multirange sampler picks an interval
        with probability proportional to its length, then a value uniformly inside it."""
        if self.kind == UNIFORM:
            low, high = self.values
            return float(low + rng.random() * (high - low))
        if self.kind == GAUSSIAN:
            mean, st_dev = self.values
            return float(rng.normal(mean, st_dev))
        intervals = self.intervals
        lengths = np.array([high - low for low, high in intervals], dtype=np.float64)
        weights = lengths / lengths.sum() if lengths.sum() > 0 else None  # all empty: any of them
        low, high = intervals[int(rng.choice(len(intervals), p=weights))]
        return float(low + rng.random() * (high - low))

    def to_yaml(self) -> dict[str, Any]:
        """Back to mlagents-learn's form (``seed`` only when set)."""
        if self.kind == MULTIRANGE:
            parameters: dict[str, Any] = {"intervals": [list(pair) for pair in self.intervals]}
        else:
            parameters = dict(zip(_PARAMETERS[self.kind], self.values, strict=True))
        if self.seed != NOT_SET:
            parameters["seed"] = self.seed
        return {"sampler_type": self.kind, "sampler_parameters": parameters}

    def __str__(self) -> str:
        """How a log line shows it, e.g. ``uniform 4..10``."""
        if self.kind == GAUSSIAN:
            return f"gaussian mean {self.values[0]:g} st_dev {self.values[1]:g}"
        ranges = ", ".join(f"{low:g}..{high:g}" for low, high in self.intervals)
        return f"{self.kind} {ranges}"


def _number(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise SettingsError(
            f"{where} must be a number, got {value!r}", f"write it as a number, e.g. {where}: 1.0"
        )
    return float(value)


def _check_range(low: float, high: float, where: str) -> None:
    if low > high:  # mlagents accepts low == high (a constant drawn as a sampler)
        raise SettingsError(
            f"{where}: the minimum {low:g} is greater than the maximum {high:g}",
            "swap them: the first value (min_value) must not exceed the second (max_value)",
        )


def _intervals(value: Any, where: str) -> tuple[float, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise SettingsError(
            f"{where} must be a list of [min, max] pairs, got {value!r}", "e.g. intervals: [[0.5, 1], [2, 3]]"
        )
    flat: list[float] = []
    for i, pair in enumerate(value):
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise SettingsError(
                f"{where}[{i}]: the sampling interval {pair!r} must contain exactly two values",
                "write each interval as [min, max]",
            )
        low, high = (_number(v, f"{where}[{i}]") for v in pair)
        _check_range(low, high, f"{where}[{i}]")
        flat += [low, high]
    return tuple(flat)


def parse_parameter(value: Any, where: str) -> float | Sampler:
    """A number, or mlagents-learn's sampler mapping, checked as mlagents-learn checks it.

    ``where`` names the value in messages (e.g. ``env_parameters.mass``).  A ``Sampler`` passes
    as it is; ``sampler_type: constant`` is a number, as in mlagents-learn."""
    if isinstance(value, Sampler):
        return value
    if not isinstance(value, Mapping):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise SettingsError(
                f"{where} must be a number or a sampler, got {value!r}", f"e.g. {where}: 1.0, or {_EXAMPLE}"
            )
        return float(value)
    kind, given = _sampler_mapping(value, where)
    inner = f"{where}.sampler_parameters"
    known = {**_PARAMETERS[kind], "seed": NOT_SET}
    unknown = [k for k in given if k not in known]
    if unknown:
        raise SettingsError(
            f"{inner}: {unknown[0]!r} is not a parameter of a {kind} sampler",
            f"its parameters are: {', '.join(known)}",
        )
    params = {**known, **given}
    seed = params["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise SettingsError(f"{inner}.seed must be an integer, got {seed!r}", "e.g. seed: 1234")
    if kind == CONSTANT:
        return _number(params["value"], f"{inner}.value")
    if kind == MULTIRANGE:
        return Sampler(kind, _intervals(params["intervals"], f"{inner}.intervals"), seed)
    first, second = (_number(params[k], f"{inner}.{k}") for k in _PARAMETERS[kind])
    if kind == UNIFORM:
        _check_range(first, second, inner)
    return Sampler(kind, (first, second), seed)


def _sampler_mapping(value: Mapping, where: str) -> tuple[str, Mapping]:
    """The sampler_type and sampler_parameters of a mapping that should be a sampler."""
    if "curriculum" in value:
        raise SettingsError(
            f"{where} is a curriculum of lessons; only a number or a sampler can be sent to the game",
            "give the value of one lesson here; lessons belong in an mlagents-learn config's"
            " environment_parameters",
        )
    if "sampler-type" in value:
        raise SettingsError(
            f"{where}: 'sampler-type' with flat keys is the pre-1.0 sampler format, which mlagents-learn"
            " 1.x refuses too",
            f"write it as {_EXAMPLE} (mlagents-upgrade-config converts old files)",
        )
    for needed in ("sampler_type", "sampler_parameters"):
        if needed not in value:
            raise SettingsError(f"{where}: a sampler needs '{needed}'", f"write it as {_EXAMPLE}")
    extra = [k for k in value if k not in ("sampler_type", "sampler_parameters")]
    if extra:
        raise SettingsError(
            f"{where}: {extra[0]!r} is not a key of a sampler",
            "put the sampler's values under sampler_parameters",
        )
    kind, given = value["sampler_type"], value["sampler_parameters"]
    if kind not in _PARAMETERS:
        raise SettingsError(
            f"{where}.sampler_type: unknown sampler {kind!r}", f"use one of: {', '.join(_PARAMETERS)}"
        )
    if not isinstance(given, Mapping):
        raise SettingsError(
            f"{where}.sampler_parameters must be a mapping, got {given!r}", f"write it as {_EXAMPLE}"
        )
    return kind, given


def seeded_in_order(values: Iterable[float | Sampler], run_seed: int) -> list[float | Sampler]:
    """Seeds for the samplers that have none, as mlagents-learn's EnvironmentParameterManager
    assigns them (``_set_sampler_seeds``): walking the values in order, each one whose seed is
    unset takes ``run_seed + offset`` and the offset grows by one.  A number counts too: it is a
    ConstantSettings there, whose seed is unset, so it uses up an offset.  For a curriculum, pass
    every parameter's lessons in order."""
    out: list[float | Sampler] = []
    offset = 0
    for value in values:
        if isinstance(value, Sampler) and value.seed != NOT_SET:
            out.append(value)
            continue
        if isinstance(value, Sampler):
            value = replace(value, seed=run_seed + offset)
        out.append(value)
        offset += 1
    return out


def with_seeds(parameters: dict[str, float | Sampler], run_seed: int) -> dict[str, float | Sampler]:
    """``parameters`` with a seed for every sampler that has none (:func:`seeded_in_order`)."""
    return dict(zip(parameters, seeded_in_order(parameters.values(), run_seed), strict=True))
