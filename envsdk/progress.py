"""The live progress line printed while training.

On a terminal one line is rewritten in place; when stdout is a file (SLURM
logs, CI) a full line is printed at most every ``log_every_s`` seconds so
logs stay readable.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from ray import tune

RETURN = "env_runners/episode_return_mean"
EVAL_RETURN = "evaluation/env_runners/episode_return_mean"  # offline algorithms' only return
# The mean return per agent-episode, as mlagents-learn's "Mean Reward" (multi-agent envs; RETURN sums
# an episode's agents): envsdk.training.hooks.agent_metrics, over the episodes RETURN averages.
AGENT_RETURN_MEAN = "agent_return_mean"
MODULE_AGENT_RETURN_MEAN = "module_agent_return_mean"  # per module: module id -> mean
AGENT_RETURN = f"env_runners/{AGENT_RETURN_MEAN}"
STEPS = "num_env_steps_sampled_lifetime"
HEALTH = "env_runner_health"  # added by envsdk.training.hooks.restarts when remote env runners fail
SELF_PLAY = "self_play"  # added by envsdk.training.hooks.self_play: per policy, its ELO and games
CURRICULUM = "curriculum"  # added by envsdk.training.hooks.lessons: per parameter, its lesson and value


def lookup(result: dict[str, Any], path: str) -> Any:
    """``result['a']['b']`` for path ``a/b`` (Tune also flattens with '/')."""
    if path in result:
        return result[path]
    node: Any = result
    for part in path.split("/"):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def mean_return(result: dict[str, Any]) -> float | None:
    """The training episodes' mean return, else the evaluation's (BC, CQL, ... sample no episodes)."""
    for key in (RETURN, EVAL_RETURN):
        value = lookup(result, key)
        if value not in (None, "") and not math.isnan(float(value)):
            return float(value)
    return None


def eta_seconds(result: dict[str, Any], stop: dict[str, Any]) -> float | None:
    """Seconds until the first countable stop criterion is reached."""
    elapsed = float(result.get("time_total_s") or 0.0)
    it = int(result.get("training_iteration") or 0)
    steps = float(lookup(result, STEPS) or 0)
    guesses = []
    if "training_iteration" in stop and it:
        guesses.append((stop["training_iteration"] - it) * elapsed / it)
    if STEPS in stop and steps:
        guesses.append((stop[STEPS] - steps) * elapsed / steps)
    if "time_total_s" in stop:
        guesses.append(stop["time_total_s"] - elapsed)
    return max(0.0, min(guesses)) if guesses else None


def fmt_duration(seconds: float | None) -> str:
    if seconds is None or math.isnan(seconds):
        return "?"
    seconds = int(seconds)
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


NO_EPISODE_END = "no episode ended; horizon: N in the config cuts them after N steps"


def return_text(ret: float | None, steps: int) -> str:
    """``return 12.5``; ``return -`` before any episode ended, and why where env steps were sampled."""
    if ret is not None:
        return f"return {ret:.1f}"
    return f"return - ({NO_EPISODE_END})" if steps else "return -"


def format_line(name: str, result: dict[str, Any], stop: dict[str, Any]) -> str:
    steps = lookup(result, STEPS) or 0
    elapsed = float(result.get("time_total_s") or 0.0)
    rate = steps / elapsed if elapsed else 0.0
    parts = [
        f"[{name}] iter {result.get('training_iteration', 0)}",
        f"{int(steps):,} steps",
        return_text(mean_return(result), int(steps)),
        f"{rate:,.0f} steps/s",
    ]
    per_agent = lookup(result, AGENT_RETURN)
    if isinstance(per_agent, int | float) and not math.isnan(per_agent):
        parts.insert(3, f"per agent {per_agent:.2f}")
    eta = eta_seconds(result, stop)
    if eta is not None:
        parts.append(f"~{fmt_duration(eta)} left")
    if RETURN in stop:
        parts.append(f"target {stop[RETURN]}")
    if AGENT_RETURN in stop:
        parts.append(f"target per agent {stop[AGENT_RETURN]}")
    for note in (self_play_note(result), lessons_note(result), health_note(result)):
        if note:
            parts.append(note)
    return " | ".join(parts)


def self_play_note(result: dict[str, Any]) -> str | None:
    """``elo cycle 1420 (won 0.62)`` for each self-play policy (None for other runs)."""
    block = result.get(SELF_PLAY)
    if not isinstance(block, dict):
        return None
    notes = []
    for policy, stats in block.items():
        if isinstance(stats, dict) and "elo" in stats:
            won = stats.get("win_rate")
            rate = f" (won {won:.2f})" if isinstance(won, float) and not math.isnan(won) else ""
            notes.append(f"elo {policy} {stats['elo']:.0f}{rate}")
    return ", ".join(notes) or None


def lessons_note(result: dict[str, Any]) -> str | None:
    """``lessons wall 2 (4.5), mass 0 (3)``: each environment parameter's lesson index and value."""
    block = result.get(CURRICULUM)
    if not isinstance(block, dict):
        return None
    shown = [
        f"{name} {stats['lesson']} ({stats['value']:g})"
        for name, stats in block.items()
        if isinstance(stats, dict) and "lesson" in stats
    ]
    return f"lessons {', '.join(shown)}" if shown else None


def health_note(result: dict[str, Any]) -> str | None:
    """``env runners: 3 restarts, 1/2 healthy`` when remote env runners failed (else None)."""
    health = result.get(HEALTH)
    if not health:
        return None
    if health.get("starting"):  # an iteration that ended before the runners' first samples (uncounted)
        return "env runners starting: waiting for their first samples"
    empty = health.get("empty_iterations", 0)
    nothing = f"SAMPLED NOTHING ({empty} iteration(s) in a row)" if empty else ""
    envs = health.get("env_restarts", 0)
    if not health["restarts"] and not envs and health["healthy"] == health["env_runners"]:
        return nothing or None
    recreated = f"{envs} envs recreated after an error" if envs else ""
    if not health["env_runners"]:  # the local env runner: only its envs can be recreated
        return recreated or nothing or None
    note = f"env runners: {health['restarts']} restarts, {health['healthy']}/{health['env_runners']} healthy"
    note += f", {recreated}" if recreated else ""
    return f"{nothing}; {note}" if nothing else note


class ProgressLine(tune.Callback):
    """Tune callback that keeps one live line of training progress."""

    def __init__(
        self,
        name: str,
        stop: dict[str, Any],
        stream: Any = None,
        log_every_s: float = 10.0,
        quiet_start: bool = False,
    ):
        self.name = name
        self.stop = stop
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.log_every_s = log_every_s
        # quiet_start: a log gets its first line after log_every_s, not at once (what ends sooner
        # says its result itself, and needs no progress line)
        self._last_print = time.monotonic() if quiet_start else 0.0
        self._width = 0

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        name = f"{self.name} {trial.trial_id}" if len(trials) > 1 else self.name
        line = format_line(name, result, self.stop)
        if len(trials) > 1:
            running = sum(1 for t in trials if t.status == "RUNNING")
            line += f" | trials {running} running / {len(trials)}"
        self.show(line)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        self.finish()

    def show(self, line: str) -> None:
        """Rewrite the live line (terminal) or log it (file, at most every ``log_every_s``)."""
        if self.tty:
            pad = max(0, self._width - len(line))
            self.stream.write("\r" + line + " " * pad)
            self._width = len(line)
        elif time.monotonic() - self._last_print >= self.log_every_s:
            self.stream.write(line + "\n")
            self._last_print = time.monotonic()
        self.stream.flush()

    def clear(self) -> None:
        """Take the live line off a terminal (what replaces it says the same, and more)."""
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
        self._width = 0

    def finish(self) -> None:
        """End the live line so that what follows starts on a line of its own."""
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
        self._width = 0
