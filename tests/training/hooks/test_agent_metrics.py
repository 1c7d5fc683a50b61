"""Agent steps and the mean return per agent: pooled step counts for agent ids that do not repeat,
the learners' clock under ``count_steps_by: agent_steps``, and ``env_runners/agent_return_mean``.

The Unity cases (new agent ids every episode, agents that end mid-episode) train on the stand-in in
tests/unity_bridge/test_unity_training.py."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from ray.rllib.utils.metrics import NUM_AGENT_STEPS_SAMPLED, NUM_AGENT_STEPS_SAMPLED_LIFETIME
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from envsdk.config.validation import parse_score_attr, parse_stop
from envsdk.errors import UserError
from envsdk.training.hooks.agent_metrics import ALL_AGENTS, agent_return_means, drop_per_agent_metrics
from tests.helpers import ROOT, progress_rows, trial_dirs


def _record(source: str, agents: dict[str, tuple[str, float]]) -> dict:
    return {
        "agents": {aid: value for aid, (_, value) in agents.items()},
        "agent_modules": {aid: module for aid, (module, _) in agents.items()},
        "source": source,
    }


# Two episodes of one sub-env ("0/0"), one of another ("1/0"): agent "b/7" is relayed from the first
# episode into the second; the other runner's "b/7" is another agent.
RECORDS = [
    _record("0/0", {"b/1": ("p", 1.0), "b/7": ("p", 0.25)}),
    _record("0/0", {"b/7": ("p", 0.5), "c/9": ("q", -0.25)}),
    _record("1/0", {"b/7": ("p", 0.75)}),
]


@pytest.mark.parametrize(
    ("stable", "parts"),
    [
        (True, {"p": [1.0, 0.25, 0.5, 0.75], "q": [-0.25]}),  # each episode's agents on their own
        (False, {"p": [1.0, 0.75, 0.75], "q": [-0.25]}),  # b/7's two parts in sub-env 0/0 joined
    ],
)
def test_agent_return_mean_is_over_agent_episodes(stable: bool, parts: dict[str, list[float]]) -> None:
    got = agent_return_means(RECORDS, stable)
    every = [v for values in parts.values() for v in values]
    assert got["agent_return_mean"] == pytest.approx(sum(every) / len(every))
    assert got["module_agent_return_mean"] == pytest.approx({m: np.mean(v) for m, v in parts.items()})


def test_single_agent_episodes_report_no_agent_return() -> None:
    assert (
        agent_return_means([{"agents": {"default_agent": 3.0}, "modules": {}, "source": "0/0"}], True) == {}
    )


def test_unstable_ids_step_counts_are_pooled_and_summed_over_samples() -> None:
    """RLlib's env runner logs per agent id (multi_agent_env_runner.py, _increase_sampled_metrics);
    the hook leaves one pooled id whose lifetime count carries over the runner's reduces."""
    runner = MetricsLogger()
    lifetime = 0
    for sample, ids in enumerate([["a/1", "a/2", "a/3"], ["a/4", "a/2"]]):
        for step in range(5):
            for aid in ids[: 1 + step % len(ids)]:
                runner.log_value((NUM_AGENT_STEPS_SAMPLED, aid), 1, reduce="sum")
                runner.log_value((NUM_AGENT_STEPS_SAMPLED_LIFETIME, aid), 1, reduce="lifetime_sum")
        steps = sum(1 + step % len(ids) for step in range(5))
        lifetime += steps
        drop_per_agent_metrics(metrics_logger=runner)
        reported = runner.reduce(compile=True)
        assert reported[NUM_AGENT_STEPS_SAMPLED] == {ALL_AGENTS: steps}, sample
        assert set(reported[NUM_AGENT_STEPS_SAMPLED_LIFETIME]) == {ALL_AGENTS}


@pytest.mark.parametrize("name", ["env_runners/agent_return_mean", "env_runners/module_agent_return_mean/p"])
def test_agent_return_names_are_stop_keys_and_scores(name: str) -> None:
    assert parse_stop({name: 0.85}, "exp.yaml:3") == ({name: 0.85}, set())  # known, not custom
    assert parse_score_attr(f"max-{name}", "exp.yaml:4") == (name, "max")


def test_a_misspelt_agent_return_is_refused_with_the_name() -> None:
    with pytest.raises(UserError) as err:
        parse_stop({"env_runners/agent_retrun_mean": 0.85}, "exp.yaml:3")
    assert err.value.hint == "did you mean 'env_runners/agent_return_mean'?"


def _per_agent_sum(row: dict[str, str], key: str) -> float:
    """RLlib's count per agent id (agent ids that repeat: runner_0, runner_1), summed."""
    return sum(float(v) for k, v in row.items() if k.startswith(f"{key}/"))


def _at(schedule: list[list[float]], t: float) -> float:
    """RLlib's Scheduler: linear between the points, the last value after them."""
    return float(np.interp(t, [p[0] for p in schedule], [p[1] for p in schedule]))


LR = [[0, 0.001], [600, 0.0001]]
ENTROPY = [[0, 0.02], [600, 0.0]]


@pytest.mark.parametrize("stock", ["", "agent-step-clock"], ids=["agent-step-clock", "stock"])
def test_schedules_count_agent_steps_and_returns_are_per_agent(train, tmp_path, monkeypatch, stock):  # type: ignore[no-untyped-def]
    """Two runners race, each its own policy: every episode holds two agent-episodes, one per module.
    Under count_steps_by: agent_steps each policy's lr and entropy coefficient are the schedules at
    its own agent steps, as mlagents-learn's trainers count them (RLlib's own clock, with the
    substitution off: env steps, one for all)."""
    monkeypatch.setenv("ENVSDK_STOCK", stock)
    (tmp_path / "multi_agent_env.py").write_text((ROOT / "configs" / "multi_agent_env.py").read_text())
    exp = {
        "run": "PPO",
        "env": "multi_agent_env.TwoRunners",
        "stop": {"training_iteration": 3, "env_runners/agent_return_mean": 100},
        "checkpoint_score_attr": "env_runners/agent_return_mean",
        "config": {
            "env_config": {"length": 3},
            "num_env_runners": 0,
            "count_steps_by": "agent_steps",
            "train_batch_size": 100,
            "minibatch_size": 50,
            "num_epochs": 1,
            "lr": LR,
            "entropy_coeff": ENTROPY,
            "policies": ["policy_0", "policy_1"],
            "policy_mapping_fn": "multi_agent_env.policy_mapping",
        },
    }
    (tmp_path / "a.yaml").write_text(yaml.safe_dump({"a": exp}))
    out = train("-f", "a.yaml", cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = progress_rows(trial_dirs(train.results)[0])
    assert len(rows) == 3
    for row in rows:
        agent_steps = _per_agent_sum(row, "env_runners/num_agent_steps_sampled_lifetime")
        env_steps = float(row["env_runners/num_env_steps_sampled_lifetime"])
        assert _per_agent_sum(row, "env_runners/num_agent_steps_sampled") >= 100
        assert float(row["env_runners/num_env_steps_sampled"]) < 100
        for module in ("policy_0", "policy_1"):
            own = float(row[f"env_runners/num_module_steps_sampled_lifetime/{module}"])
            clock = env_steps if stock else own
            assert own < agent_steps
            lr = float(row[f"learners/{module}/default_optimizer_learning_rate"])
            assert lr == pytest.approx(_at(LR, clock), rel=1e-5)
            entropy = float(row[f"learners/{module}/curr_entropy_coeff"])
            assert entropy == pytest.approx(_at(ENTROPY, clock), abs=1e-7)
            per_module = float(row[f"env_runners/module_episode_returns_mean/{module}"])
            assert float(row[f"env_runners/module_agent_return_mean/{module}"]) == pytest.approx(per_module)
        per_agent = float(row["env_runners/agent_return_mean"])
        assert per_agent == pytest.approx(float(row["env_runners/episode_return_mean"]) / 2)
    assert "per agent" in out.stdout


def test_the_clock_counts_the_trained_policies_steps_and_not_self_plays_opponents():
    """mlagents-learn's ghost trainer counts the learning team's steps: a frozen opponent's agents
    do not move the schedules."""
    from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_MODULE_STEPS_SAMPLED_LIFETIME

    from envsdk.training.hooks.agent_step_clock import agent_steps_sampled
    from envsdk.training.hooks.self_play import opponent_of

    class Metrics:
        def peek(self, key, default=None):
            if key == (ENV_RUNNER_RESULTS, NUM_MODULE_STEPS_SAMPLED_LIFETIME):
                return {"Striker": 120, opponent_of("Striker"): 60, "Goalie": 40, opponent_of("Goalie"): 30}
            return default

    assert agent_steps_sampled(Metrics()) == 160
