"""``episode_return_mean`` and friends over the last ``metrics_num_episodes_for_smoothing`` episodes.

The real-training tests take the truth from the env itself: it appends each
finished episode's return to a file, and a user hook appends what the result
reported after each iteration, so the check owes nothing to RLlib's episode
objects or to our runner-side code.
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

from envsdk.training.hooks.episode_window import FINISHED, EpisodeWindow
from tests.helpers import ROOT, progress_rows, trial_dirs


def _expected(iterations: list[list[float]], size: int) -> list[float | None]:
    """The documented value after each iteration: the last ``size`` returns, or all of a bigger iteration."""
    seen: list[float] = []
    out: list[float | None] = []
    for new in iterations:
        seen += new
        last = new if len(new) > size else seen[-size:]
        out.append(sum(last) / len(last) if last else None)
    return out


@pytest.mark.parametrize("size", [1, 3, 7, 100])
@pytest.mark.parametrize("pattern", ["steady", "bursts", "gaps", "ones", "one-big"])
def test_window_matches_the_documented_rule(size, pattern):
    counts = {"steady": [4] * 6, "bursts": [0, 12, 1, 0, 9, 2], "gaps": [0, 0, 3, 0, 0, 1], "ones": [1] * 9,
              "one-big": [2, 150, 3, 1]}[pattern]  # fmt: skip
    value = iter(range(10_000))
    iterations = [[float(next(value) % 37) for _ in range(n)] for n in counts]
    window = EpisodeWindow(size)
    for new, expected in zip(iterations, _expected(iterations, size), strict=True):
        records = [{"return": r, "len": int(r) + 1, "agents": {}, "modules": {}, "ended": float(i)}
                   for i, r in enumerate(new)]  # fmt: skip
        records = records[1::2] + records[::2]  # two runners' series, merged one after the other
        runners = {FINISHED: records[0] if len(records) == 1 else records}  # as Ray compiles one item
        if not new:
            runners = {"episode_return_mean": math.nan}  # RLlib's value when no episode ended
        result = {"env_runners": runners}
        window(result=result)
        assert FINISHED not in result["env_runners"]
        got = result["env_runners"]["episode_return_mean"]
        if expected is None:
            assert math.isnan(got)
        else:
            assert got == pytest.approx(expected)
            assert result["env_runners"]["episode_len_mean"] == pytest.approx(expected + 1)


def test_per_module_returns_average_only_episodes_the_module_played():
    window = EpisodeWindow(10)
    result = {"env_runners": {
        FINISHED: [{"return": 3.0, "len": 5, "agents": {"a": 1.0, "b": 2.0}, "modules": {"p": 1.0, "q": 2.0},
                    "ended": 1.0},
                   {"return": 5.0, "len": 5, "agents": {"a": 5.0}, "modules": {"p": 5.0}, "ended": 2.0}],
        "module_episode_returns_mean": {"p": 5.0, "q": 2.0},
    }}  # fmt: skip
    window(result=result)
    assert result["env_runners"]["module_episode_returns_mean"] == {"p": 3.0, "q": 2.0}
    assert "agent_episode_returns_mean" not in result["env_runners"]  # not added where RLlib had none


LOGGED = '''
import json
import gymnasium as gym
import numpy as np
from multi_agent_env import TwoRunners


class LoggedCartPole(gym.Wrapper):
    """CartPole that appends each finished episode's return to config["log"]."""

    def __init__(self, config):
        super().__init__(gym.make("CartPole-v1"))
        self.log, self.total = config["log"], 0.0

    def reset(self, **kwargs):
        self.total = 0.0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.total += reward
        if terminated or truncated:
            with open(self.log, "a") as fh:
                fh.write(json.dumps({"return": self.total}) + "\\n")
        return obs, reward, terminated, truncated, info


class LoggedRunners(TwoRunners):
    """The two-runner race, logging each finished episode's total and per-policy returns."""

    def __init__(self, config=None):
        super().__init__(config)
        self.log = self.config["log"]

    def reset(self, *, seed=None, options=None):
        self.totals = {a: 0.0 for a in self.possible_agents}
        return super().reset(seed=seed, options=options)

    def step(self, action_dict):
        obs, rewards, terminated, truncated, info = super().step(action_dict)
        for agent, reward in rewards.items():
            self.totals[agent] += reward
        if terminated.get("__all__") or truncated.get("__all__"):
            modules = {f"policy_{a[-1]}": r for a, r in self.totals.items()}
            with open(self.log, "a") as fh:
                fh.write(json.dumps({"return": sum(self.totals.values()), "modules": modules}) + "\\n")
        return obs, rewards, terminated, truncated, info


def mark(*, result, **_):
    """A user's on_train_result hook: what this iteration's result says (ours run first)."""
    runners = result["env_runners"]
    with open(LOG, "a") as fh:
        fh.write(json.dumps({"mean": runners.get("episode_return_mean"),
                             "modules": runners.get("module_episode_returns_mean")}) + "\\n")
'''

CASES = {
    # One process: the driver's own env runner, three envs in it.
    "single-agent-local": {"env": "logged.LoggedCartPole", "num_env_runners": 0,
                           "num_envs_per_env_runner": 3},
    # Two remote runners: episodes reach the driver from two processes.  Which episodes are "the last
    # 7" then hangs on sub-millisecond timing between the processes, so this case checks a window that
    # holds every episode: the true mean over both runners (RLlib's was a mean of per-runner means).
    "single-agent-2-runners": {"env": "logged.LoggedCartPole", "num_env_runners": 2,
                               "metrics_num_episodes_for_smoothing": 10_000},
    "multi-agent": {"env": "logged.LoggedRunners", "num_env_runners": 0, "policies": ["policy_0", "policy_1"],
                    "policy_mapping_fn": "multi_agent_env.policy_mapping"},
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_reported_returns_are_the_last_episodes_mean(train, tmp_path, case):
    log = tmp_path / "episodes.jsonl"
    (tmp_path / "logged.py").write_text(f"LOG = {str(log)!r}\n" + LOGGED)
    (tmp_path / "multi_agent_env.py").write_text((ROOT / "configs" / "multi_agent_env.py").read_text())
    settings = dict(CASES[case])
    size = settings.pop("metrics_num_episodes_for_smoothing", 7)
    exp = {
        "run": "PPO",
        "env": settings.pop("env"),
        "stop": {"training_iteration": 6},
        "config": {
            "env_config": {"log": str(log), "length": 4},
            "train_batch_size": 200,
            "minibatch_size": 100,
            "num_epochs": 1,
            "metrics_num_episodes_for_smoothing": size,
            "callbacks_on_train_result": "logged.mark",
            **settings,
        },
    }
    (tmp_path / "w.yaml").write_text(yaml.safe_dump({"w": exp}))
    out = train("-f", "w.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]

    iterations: list[list[dict]] = [[]]
    marks = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        if "mean" in entry:
            marks.append(entry)
            iterations.append([])
        else:
            iterations[-1].append(entry)
    assert len(marks) == 6 and sum(map(len, iterations)) > 7  # more episodes than the small window
    expected = _expected([[e["return"] for e in it] for it in iterations[:-1]], size)
    assert [m["mean"] for m in marks] == pytest.approx(expected)
    rows = progress_rows(trial_dirs(train.results)[0])
    assert [float(r["env_runners/episode_return_mean"]) for r in rows] == pytest.approx(expected)
    if case == "multi-agent":
        for module in ("policy_0", "policy_1"):
            per_module = [[e["modules"][module] for e in it] for it in iterations[:-1]]
            assert [m["modules"][module] for m in marks] == pytest.approx(_expected(per_module, size))


def test_stop_reads_the_windowed_mean(train, tmp_path):
    """A stop at a return stops on the window's mean: the last row reaches it, the one before does not."""
    spec = yaml.safe_load((ROOT / "configs" / "cartpole-ppo.yaml").read_text())
    (exp,) = spec.values()
    exp["stop"] = {"env_runners/episode_return_mean": 60, "num_env_steps_sampled_lifetime": 100_000}
    exp["config"]["metrics_num_episodes_for_smoothing"] = 20
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(spec))
    out = train("-f", str(tmp_path / "s.yaml"))
    assert out.returncode == 0, out.stderr[-2000:]
    returns = [
        float(r["env_runners/episode_return_mean"]) for r in progress_rows(trial_dirs(train.results)[0])
    ]
    assert returns[-1] >= 60 and all(r < 60 for r in returns[:-1])
    assert not any(math.isnan(r) for r in returns)
