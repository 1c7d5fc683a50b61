"""Many agents, batched, on multi-agent envs that are not Unity games
(envsdk/training/substitutes/sampling/agent_rounds.py) against RLlib's own multi-agent env runner.

With the same weights and no exploration both runners step the same envs with the same actions, so
their episodes (rounds, as RLlib keeps them) are equal: every agent's observations, actions, rewards,
extra model outputs and ends, over samples that cut rounds and go on with them; and so are the
runners' counters and episode metrics.  The envs cover what RLlib's multi-agent episodes handle:
agents ending at different times (MultiAgentCartPole, PettingZoo's knights_archers_zombies, whose
dead agents leave the dicts), turns (an agent acts, and gets its reward later: hanging actions),
Box actions unsquashed or clipped for the env, several policies, action masks, self-play (its
learning and frozen modules), steps counted by agent, a sub-env that fails and is made again, and
several envs per runner.  With ``observation_filter: MeanStdFilter`` the loop takes a step's rows
into the statistics together, so only its statistics are checked (against every raw observation).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tree
from ray.rllib.env.multi_agent_env_runner import MultiAgentEnvRunner

from envsdk import substitutions
from envsdk.envs.faults.records import ObservationFault
from envsdk.training.substitutes.sampling.agents_batched import AgentsBatchedRunner
from tests.helpers import ROOT, built_from, failing_every

pytestmark = pytest.mark.substitution(substitutions.AGENTS_BATCHED)

ENVS = ROOT / "tests" / "data" / "envs"
EXAMPLES = "ray.rllib.examples.envs.classes.multi_agent"
# case -> (env, config): what each covers is in the module docstring
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "cartpole-2-policies": (
        f"{EXAMPLES}.MultiAgentCartPole",
        {
            "env_config": {"num_agents": 3},
            "policies": ["policy_0", "policy_1"],
            "policy_mapping_fn": "maps.by_two",
        },
    ),
    "pendulum-box": (f"{EXAMPLES}.MultiAgentPendulum", {"env_config": {"num_agents": 2}}),
    "turns": (
        "turn_env.TurnEnv",
        {
            "env_config": {"length": 7, "act": "box"},
            "policies": ["policy_x", "policy_y"],
            "policy_mapping_fn": "turn_env.policy_mapping",
        },
    ),
    "pettingzoo": ("pettingzoo.butterfly.knights_archers_zombies_v11", {"env_config": {"max_cycles": 40}}),
    "self-play-turns-masked": ("pettingzoo.classic.tictactoe_v3", {"self_play": {"save_steps": 100}}),
    "clipped-box": (
        f"{EXAMPLES}.MultiAgentPendulum",
        {"env_config": {"num_agents": 2}, "normalize_actions": False, "clip_actions": True},
    ),
    "agent-steps": (
        f"{EXAMPLES}.MultiAgentCartPole",
        {"env_config": {"num_agents": 3}, "count_steps_by": "agent_steps"},
    ),
    "sub-env-fails-and-is-made-again": (
        "failing_env.FailingEnv",
        {
            "env_config": {"length": 7, "marker": "the test's"},
            "restart_failed_sub_environments": True,
            "policies": ["policy_x", "policy_y"],
            "policy_mapping_fn": "turn_env.policy_mapping",
        },
    ),
}
MAPS = """
def by_two(agent_id, episode=None, **kwargs):
    return f"policy_{int(agent_id) % 2}"

def step(**kwargs):
    pass
"""
FAILING_ENV = """
from pathlib import Path

from turn_env import TurnEnv

class FailingEnv(TurnEnv):  # the first to reach env step 4 of its second episode fails, once per marker
    def __init__(self, config=None):
        super().__init__(config)
        self.marker = Path((config or {})["marker"])
        self.episodes = 0

    def reset(self, *, seed=None, options=None):
        self.episodes += 1
        return super().reset(seed=seed, options=options)

    def step(self, actions):
        if self.episodes == 2 and self.t == 4 and not self.marker.exists():
            self.marker.touch()
            raise RuntimeError("the simulator lost its connection")
        return super().step(actions)
"""
NAN_ENV = """
import numpy as np
from turn_env import TurnEnv

class NanEnv(TurnEnv):  # observations NaN from env step 3 on
    def step(self, actions):
        obs, *rest = super().step(actions)
        if self.t >= 3:
            obs = {agent: np.full(2, np.nan, np.float32) for agent in obs}
        return (obs, *rest)
"""


def _built(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    env: str | None = None,
    marker: str = "",
    **extra: Any,
) -> Any:
    shutil.copy(ENVS / "turn_env.py", tmp_path / "turn_env.py")
    (tmp_path / "maps.py").write_text(MAPS)
    for name, text in (("nan_env", NAN_ENV), ("failing_env", FAILING_ENV)):
        (tmp_path / f"{name}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    default, config = CASES[case]
    env = env or default
    if "marker" in config.get("env_config", {}):
        config = {**config, "env_config": {**config["env_config"], "marker": marker}}
    settings = {
        "run": "PPO",
        "env": env,
        "config": {
            "num_env_runners": 0,
            "num_envs_per_env_runner": 2,
            "train_batch_size": 40,
            "minibatch_size": 20,
            "seed": 3,
            **config,
            **extra,
        },
    }
    return built_from(tmp_path, settings)


def _runners(built: Any) -> tuple[MultiAgentEnvRunner, AgentsBatchedRunner]:
    config = built.config.copy(copy_frozen=False)
    theirs = MultiAgentEnvRunner(config=config.copy(copy_frozen=False).env_runners(env_runner_cls=None))
    ours = AgentsBatchedRunner(config=config, worker_index=0)
    ours.module.set_state(theirs.module.get_state())
    return theirs, ours


def _same_episodes(want: list[Any], have: list[Any]) -> None:
    assert [(len(e), e.is_terminated, e.is_truncated) for e in want] == [
        (len(e), e.is_terminated, e.is_truncated) for e in have
    ]
    for a, b in zip(want, have, strict=True):
        assert a.env_t_started == b.env_t_started and a.get_return() == pytest.approx(b.get_return())
        assert set(a.agent_episodes) == set(b.agent_episodes)
        for aid, x in a.agent_episodes.items():
            y = b.agent_episodes[aid]
            assert (len(x), x.module_id, x.is_terminated, x.is_truncated) == (
                len(y), y.module_id, y.is_terminated, y.is_truncated
            ), aid  # fmt: skip
            tree.map_structure(np.testing.assert_allclose, x.get_observations(), y.get_observations())
            tree.map_structure(np.testing.assert_array_equal, x.get_actions(), y.get_actions())
            np.testing.assert_allclose(x.get_rewards(), y.get_rewards())
            assert x.get_infos() == y.get_infos(), aid
            assert set(x.extra_model_outputs) == set(y.extra_model_outputs), aid
            for key in x.extra_model_outputs:
                np.testing.assert_allclose(
                    x.get_extra_model_outputs(key), y.get_extra_model_outputs(key), rtol=1e-5, atol=1e-6
                )
        b.validate()


def _counters(runner: Any) -> dict[str, Any]:
    metrics = runner.get_metrics()

    def value(key: str) -> Any:
        found = metrics[key]
        if isinstance(found, dict):
            return {k: round(float(v.peek()), 6) for k, v in found.items()}
        return round(float(found.peek()), 6)

    keys = ("num_env_steps_sampled", "num_episodes", "episode_return_mean", "episode_len_mean",
            "num_agent_steps_sampled", "num_module_steps_sampled", "agent_episode_returns_mean")  # fmt: skip
    return {key: value(key) for key in keys}


@pytest.mark.parametrize("case", list(CASES))
def test_each_round_is_rllibs_episode_step_for_step(tmp_path, monkeypatch, case) -> None:
    marker = tmp_path / "failed"  # FailingEnv's: one failure for each runner
    built = _built(tmp_path, monkeypatch, case, marker=str(marker))
    assert built.sampler == "agents-batched"
    theirs, ours = _runners(built)
    sizes = (150, 151, 140)  # each cuts rounds: the next sample goes on with them
    try:
        want = [theirs.sample(num_timesteps=size, explore=False) for size in sizes]
        marker.unlink(missing_ok=True)
        have = [ours.sample(num_timesteps=size, explore=False) for size in sizes]
        assert ours.samples_rounds
        for a, b in zip(want, have, strict=True):
            _same_episodes(a, b)
        everything = [e for sample in have for e in sample]
        assert any(e.is_done for e in everything) and any(not e.is_done for e in everything)
        assert _counters(theirs) == _counters(ours)
        assert marker.exists() == (case == "sub-env-fails-and-is-made-again")
    finally:
        theirs.stop()
        ours.stop()


def test_an_env_failing_more_often_than_a_sample_is_long_ends_the_run(tmp_path, monkeypatch) -> None:
    """RLlib's runner counts a sample afresh after each failure (``env_ts = 0``): an env failing at every
    third step would sample for ever; the rounds loop ends the run past FAILED_STEPS_PER_SAMPLE failures."""
    from envsdk.training.substitutes.sampling import batched_runner

    built = _built(tmp_path, monkeypatch, "pendulum-box", restart_failed_sub_environments=True)
    theirs, ours = _runners(built)
    theirs.stop()
    calls = {"n": 0}
    try:
        assert ours.sample(num_timesteps=10)  # made as RLlib makes it, before the env's class is patched
        env_class = type(ours.env.envs[0])  # each sub-env's, which the vector env steps in turn
        monkeypatch.setattr(env_class, "step", failing_every(3, env_class.step, calls))
        with pytest.raises(batched_runner.EnvKeepsFailing, match=r"ValueError: the game crashed \(frame 9\)"):
            ours.sample(num_timesteps=30)
        assert ours.samples_rounds
        assert calls["n"] == 3 * (batched_runner.FAILED_STEPS_PER_SAMPLE + 1)
    finally:
        ours.stop()


def test_exploring_draws_each_policys_actions_with_their_log_probabilities(tmp_path, monkeypatch) -> None:
    """Exploration draws in numpy (agent_rows.py): each agent's action is in its space, its log-probability
    that of the policy's distribution for it; the env gets Box actions unsquashed into its bounds."""
    import torch

    built = _built(tmp_path, monkeypatch, "pendulum-box")
    theirs, ours = _runners(built)
    theirs.stop()
    sent: list[float] = []
    try:
        ours.why_not()
        original = ours.env.step

        def step(actions: Any) -> Any:
            sent.extend(float(a[0]) for per_env in actions for a in per_env.values())
            return original(actions)

        ours.env.step = step  # type: ignore[method-assign]
        episodes = ours.sample(num_timesteps=40)
    finally:
        ours.stop()
    (module,) = ours.module.values()
    for episode in episodes:
        for single in episode.agent_episodes.values():
            n = len(single)
            inputs = torch.as_tensor(single.get_extra_model_outputs("action_dist_inputs", slice(0, n)))
            actions = torch.as_tensor(single.get_actions(slice(0, n)))
            logp = module.get_exploration_action_dist_cls().from_logits(inputs).logp(actions)
            np.testing.assert_allclose(
                single.get_extra_model_outputs("action_logp", slice(0, n)), logp.numpy(), rtol=1e-4, atol=1e-5
            )
    stored = np.concatenate([s.get_actions()[:, 0] for e in episodes for s in e.agent_episodes.values()])
    # the env's Box is [-2, 2]: a normalized action a is sent as 2a, clipped into its bounds
    np.testing.assert_allclose(sorted(sent), sorted(np.clip(2 * stored, -2, 2)), rtol=1e-5, atol=1e-6)
    assert len(sent) == len(stored) == 40 * 2 and np.abs(stored).max() > 0.5


def test_observation_filter_normalises_each_step_as_its_connector_keeps_it(tmp_path, monkeypatch) -> None:
    """``observation_filter: MeanStdFilter``: each step's new observations, per policy in one batch,
    go into the connector's own statistics, which then hold every raw observation the envs returned
    (resets too); the episodes keep them normalised, in the filter's space."""
    built = _built(tmp_path, monkeypatch, "pendulum-box", observation_filter="MeanStdFilter")
    ours = AgentsBatchedRunner(config=built.config.copy(copy_frozen=False), worker_index=0)
    raw: list[np.ndarray] = []
    try:
        ours.why_not()
        env = ours.env
        original = env.step

        def step(actions: Any) -> Any:
            results = original(actions)
            raw.extend(np.array(o) for obs in results[0] for o in obs.values())
            return results

        env.step = step  # type: ignore[method-assign]
        episodes = ours.sample(num_timesteps=40)
        (stats,) = ours._filter.get_state()["agents"].values()  # type: ignore[union-attr]
    finally:
        ours.stop()
    ((seen),) = stats["seen"].values()
    reset = 2 * 2  # the first reset's observations (2 envs x 2 agents), normalised by RLlib's connector
    assert seen.count == len(raw) + reset
    kept = np.concatenate([s.get_observations() for e in episodes for s in e.agent_episodes.values()])
    assert np.abs(kept).max() <= 10.0 and abs(float(kept.mean())) < 0.5
    filtered = ours._filter.filtered_space(next(iter(ours.module.keys())))  # type: ignore[union-attr]
    assert all(s.observation_space == filtered for e in episodes for s in e.agent_episodes.values())


@pytest.mark.substitution(substitutions.AGENTS_BATCHED, substitutions.ENV_GUARD)
def test_a_non_finite_observation_is_named_by_the_env_guard(tmp_path, monkeypatch) -> None:
    """The loop steps the runner's vector env: the env guard checks what it returns."""
    built = _built(tmp_path, monkeypatch, "turns", env="nan_env.NanEnv")
    ours = AgentsBatchedRunner(config=built.config.copy(copy_frozen=False), worker_index=0)
    try:
        with pytest.raises(RuntimeError) as raised:  # RLlib's _try_env_step, from the guard's error
            ours.sample(num_timesteps=20)
    finally:
        ours.stop()
    fault = raised.value.__cause__
    assert isinstance(fault, ObservationFault)
    assert re.search(r"agent 'y'\) returned a non-finite observation.* at step 3 of its episode", str(fault))


@pytest.mark.parametrize(
    ("config", "why"),
    [
        ({"callbacks_on_episode_step": "maps.step"}, "on_episode_step callback maps.step"),
        ({"model_config": {"use_lstm": True, "max_seq_len": 4}}, "recurrent"),
        ({"batch_mode": "complete_episodes"}, "complete_episodes"),
        ({}, f"stock: {substitutions.AGENTS_BATCHED} off"),
    ],
)
def test_configs_it_does_not_cover_sample_with_rllibs_runner(tmp_path, monkeypatch, config, why) -> None:
    if not config:
        monkeypatch.setenv(substitutions.STOCK, substitutions.AGENTS_BATCHED)
    built = _built(tmp_path, monkeypatch, "cartpole-2-policies", **config)
    assert built.config.env_runner_cls is None and built.sampler.startswith("rllib") and why in built.sampler
