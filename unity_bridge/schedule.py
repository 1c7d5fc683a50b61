"""Environment parameters that change with training progress, from the YAML alone.

    curriculum: unity_bridge.schedule.parameter_schedule
    config:
      env_config:
        parameter_schedule: {track_length: [[0, 4], [20000, 10]]}

Each parameter takes the value of the last point whose timesteps have been
reached (a step function, like ML-Agents' lessons).
"""

from __future__ import annotations

from typing import Any


def value_at(points: list[list[float]], timesteps: float) -> float:
    current = points[0][1]
    for at, value in sorted(points, key=lambda p: p[0]):
        if timesteps >= at:
            current = value
    return float(current)


def parameter_schedule(train_results: dict[str, Any], env: Any, env_ctx: Any) -> dict[str, float]:
    """Curriculum function: the env's parameters with every scheduled one at its current value."""
    schedule = dict(env_ctx.get("parameter_schedule") or {})
    done = float(train_results.get("timesteps_total") or 0)
    return {**env.get_task(), **{name: value_at(points, done) for name, points in schedule.items()}}
