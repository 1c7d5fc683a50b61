"""Reward signals in APPO, IMPALA, SAC and DQN (envsdk/training/substitutes/reward_signals.py): the
signals' rewards summed into the reward the algorithm's loss reads, their models learnt on the same
batch, and what one value function cannot take refused before anything starts."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest
import torch
import yaml

from envsdk import substitutions
from envsdk.config.own_keys.reward_signals import RewardSignals, Signal
from envsdk.errors import UserError
from tests.helpers import ROOT, built_config, keep_substitutions_on, progress_rows, run_train, trial_dirs
from tests.training.substitutes.test_ppo_signals import _write_demo

SIGNALS = RewardSignals(
    (
        Signal(name="extrinsic", gamma=0.99, strength=0.5),
        Signal(name="curiosity", gamma=0.99, strength=0.1),
        Signal(name="rnd", gamma=0.99, strength=2.0),
    )
)


def test_the_reward_is_each_signals_times_its_strength_summed() -> None:
    """0.5 x the env's + 0.1 x curiosity's + 2 x RND's; a row the mask drops gets none of the
    intrinsic rewards; without extrinsic, none of the env's."""
    from envsdk.training.substitutes.reward_signals import summed_rewards

    env = torch.tensor([1.0, 2.0, -4.0, 0.0])
    intrinsic = {
        "curiosity": torch.tensor([10.0, 0.0, 20.0, 30.0]),
        "rnd": torch.tensor([0.25, 1.0, 0.0, 5.0]),
    }
    mask = torch.tensor([True, True, True, False])
    total, means = summed_rewards(env, intrinsic, SIGNALS, mask)
    assert total.tolist() == [0.5 + 1.0 + 0.5, 1.0 + 0.0 + 2.0, -2.0 + 2.0 + 0.0, 0.0]
    assert means == pytest.approx({"extrinsic": -1 / 6, "curiosity": 1.0, "rnd": 2.5 / 3})
    novelty = RewardSignals(SIGNALS.signals[1:])
    total, _ = summed_rewards(env, intrinsic, novelty, None)
    assert total.tolist() == [1.5, 2.0, 2.0, 13.0]


class _RLlibLoss:
    """In place of RLlib's learner below the mixin: the batch its losses would read, kept."""

    def compute_losses(self, *, fwd_out: dict[str, Any], batch: dict[str, Any]) -> dict[str, Any]:
        self.seen = batch
        return {module_id: torch.zeros(()) for module_id in fwd_out}


def _summing_learner(signals: RewardSignals) -> tuple[Any, Any]:
    """A SummedSignalsLearner over :class:`_RLlibLoss` whose policy "a" has ``signals`` (Box(3,)
    observations, Discrete(2) actions), and that policy's signals module."""
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from envsdk.networks.reward_signals import SIGNALS as SIGNALS_KEY
    from envsdk.networks.reward_signals import RewardSignalsModule, signals_module_id
    from envsdk.training.substitutes.reward_signals import SummedSignalsLearner

    module = RewardSignalsModule(
        observation_space=gym.spaces.Box(-1.0, 1.0, (3,)),
        action_space=gym.spaces.Discrete(2),
        model_config={SIGNALS_KEY: signals.to_config()},
    )

    class Learner(SummedSignalsLearner, _RLlibLoss):
        pass

    learner: Any = Learner()
    learner.summed_signals = {"a": signals}
    learner.module = {signals_module_id("a"): module}
    learner.metrics = MetricsLogger()
    return learner, module


def test_rllibs_loss_gets_the_batch_with_only_the_rewards_summed() -> None:
    """A hand-made batch of a policy with RND and one without: RLlib's loss reads the first's
    reward as the env's plus RND's (its model's current output) times their strengths, every other
    column and module as given; the signals module's loss joins the policy's."""
    from ray.rllib.core.columns import Columns

    from envsdk.networks.reward_signals import signals_module_id

    rnd_signal = Signal(name="rnd", gamma=0.99, strength=2.0, learning_rate=1e-4)
    learner, module = _summing_learner(RewardSignals((SIGNALS.signals[0], rnd_signal)))
    columns = {
        Columns.OBS: torch.randn(5, 3),
        Columns.ACTIONS: torch.tensor([0, 1, 1, 0, 1]),
        Columns.REWARDS: torch.tensor([1.0, 0.0, 2.0, -1.0, 0.5]),
    }
    other = {Columns.REWARDS: torch.ones(5)}
    losses = learner.compute_losses(fwd_out={"a": {}, "b": {}}, batch={"a": columns, "b": other})
    rnd = module.rewards({Columns.OBS: columns[Columns.OBS]})["rnd"]
    assert torch.allclose(learner.seen["a"][Columns.REWARDS], 0.5 * columns[Columns.REWARDS] + 2.0 * rnd)
    assert learner.seen["a"][Columns.OBS] is columns[Columns.OBS] and learner.seen["b"] is other
    assert set(losses) == {"a", "b", signals_module_id("a")} and losses[signals_module_id("a")].requires_grad
    logged = learner.metrics.peek(("a", "reward_signals", "rnd", "reward_mean"))
    assert logged == pytest.approx(float(2.0 * rnd.mean()))


@pytest.mark.parametrize(("names", "cleared"), [(("curiosity", "rnd"), True), (("extrinsic", "rnd"), False)])
def test_curiosity_and_rnd_alone_bootstrap_through_a_termination(
    names: tuple[str, ...], cleared: bool
) -> None:
    """ML-Agents' ignore_done: a policy whose signals are curiosity and RND only learns with the
    batch's terminations cleared (its target bootstraps); with the env's reward they stay."""
    from ray.rllib.core.columns import Columns

    learner, _ = _summing_learner(RewardSignals(tuple(s for s in SIGNALS.signals if s.name in names)))
    terminated = torch.tensor([False, False, True, False])
    columns = {
        Columns.OBS: torch.randn(4, 3),
        Columns.NEXT_OBS: torch.randn(4, 3),
        Columns.ACTIONS: torch.tensor([0, 1, 1, 0]),
        Columns.REWARDS: torch.ones(4),
        Columns.TERMINATEDS: terminated,
    }
    learner.compute_losses(fwd_out={"a": {}}, batch={"a": columns})
    seen = learner.seen["a"][Columns.TERMINATEDS]
    assert seen.dtype == torch.bool and seen.tolist() == ([False] * 4 if cleared else terminated.tolist())


@pytest.mark.substitution(substitutions.IMPALA_LEARNER, substitutions.DQN_LEARNER)
@pytest.mark.parametrize("run", ["APPO", "DQN"])
def test_mixed_signals_in_one_value_say_it_once(
    tmp_path: Path, run: str, capsys: pytest.CaptureFixture[str]
) -> None:
    signals = {"extrinsic": {}, "rnd": {}}
    built_config(tmp_path, run, "box", "discrete", False, reward_signals=signals)
    built_config(tmp_path, run, "box", "discrete", False, reward_signals=signals)
    said = [line for line in capsys.readouterr().err.splitlines() if "value head per signal" in line]
    assert said == [
        f"notice: the run's reward_signals (extrinsic, rnd) in {run}: one value learns their summed rewards"
        " and stops at an episode's termination, where ML-Agents bootstraps curiosity's and rnd's through"
        " it; PPO has a value head per signal"
    ]


# One run for the four algorithms (one train.py start): APPO with curiosity and GAIL (use_actions:
# its done flag from MarkEpisodeEnds), IMPALA with RND, SAC with curiosity (continuous actions),
# DQN multi-agent, a policy with signals of its own.
# APPO and IMPALA learn asynchronously: an iteration returns whether or not their learner has
# reported, so theirs last 2 s each (with none, a busy CI machine's 8 iterations reported none).
QUICK = {"num_env_runners": 0, "min_time_s_per_iteration": 0}
ASYNC = {
    **QUICK,
    "min_time_s_per_iteration": 2,
    "num_envs_per_env_runner": 2,
    "train_batch_size": 32,
    "rollout_fragment_length": 16,
}
REPLAY = {
    **QUICK,
    "train_batch_size": 32,
    "num_steps_sampled_before_learning_starts": 32,
    "min_sample_timesteps_per_iteration": 64,
}
CURIOSITY = {"strength": 0.1, "learning_rate": 1e-3}
GAIL = {"strength": 0.1, "demo_path": "expert.demo", "use_actions": True}
EXPERIMENTS = {
    "APPO": ("CartPole-v1", 5, {**ASYNC, "reward_signals": {
        "extrinsic": {}, "curiosity": CURIOSITY, "gail": GAIL}}),
    "IMPALA": ("CartPole-v1", 5, {**ASYNC, "reward_signals": {"extrinsic": {}, "rnd": {"strength": 0.1}}}),
    "SAC": ("Pendulum-v1", 2, {**REPLAY, "reward_signals": {
        "extrinsic": {"strength": 0.5}, "curiosity": CURIOSITY}}),
    "DQN": ("multi_agent_env.TwoRunners", 2, {
        **REPLAY, "env_config": {"length": 5}, "policies": ["policy_0", "policy_1"],
        "policy_mapping_fn": "multi_agent_env.policy_mapping",
        "reward_signals": {"extrinsic": {}, "rnd": {"strength": 0.1}},
        "algorithm_config_overrides_per_module": {"policy_1": {"reward_signals": {"curiosity": CURIOSITY}}}}),
}  # fmt: skip
LEARNERS = (substitutions.IMPALA_LEARNER, substitutions.SAC_LEARNER, substitutions.DQN_LEARNER)
ON = pytest.mark.substitution(*LEARNERS)  # the learners that sum the signals, on in stock mode too
LOSSES = {"curiosity": ("forward_loss", "inverse_loss"), "rnd": ("loss",), "gail": ("loss",)}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """Each algorithm's progress.csv rows, from one train.py run of the four experiments."""
    folder = tmp_path_factory.mktemp("summed")
    shutil.copy(ROOT / "configs" / "multi_agent_env.py", folder / "multi_agent_env.py")
    _write_demo(folder / "expert.demo", 4)
    experiments = {
        run: {"run": run, "env": env, "stop": {"training_iteration": iters}, "config": config}
        for run, (env, iters, config) in EXPERIMENTS.items()
    }
    path = folder / "exp.yaml"
    path.write_text(yaml.safe_dump(experiments, sort_keys=False))
    with pytest.MonkeyPatch.context() as patch:  # a module's fixture: before each test's marks apply
        keep_substitutions_on(patch, LEARNERS)
        out = run_train(["-f", str(path), "--local-dir", str(folder / "results")])
    assert out.returncode == 0, out.stderr[-3000:]
    return {trial.parent.name: progress_rows(trial) for trial in trial_dirs(folder / "results")}


def _signals_of(run: str) -> dict[str, list[str]]:
    """Policy -> the signals it trains with, in ``run``'s experiment."""
    config = EXPERIMENTS[run][2]
    given = [str(name) for name in config["reward_signals"]]
    if run != "DQN":
        return {"default_policy": given}
    return {"policy_0": given, "policy_1": ["curiosity"]}


@pytest.mark.slow
@pytest.mark.parametrize("run", list(EXPERIMENTS))
def test_each_algorithm_trains_on_the_summed_signals_and_reports_them(
    trained: dict[str, list[dict]], run: str
) -> None:
    """Each signal's reward_mean (finite, nonzero in some iteration) and each model's losses are
    progress.csv columns under its policy, as PPO's; a policy without extrinsic reports none."""
    for policy, names in _signals_of(run).items():
        # the iterations whose learner reported (APPO's and IMPALA's learn asynchronously: RLlib's
        # results are nan, its loss too, in an iteration without an update)
        rows = [
            r for r in trained[run] if math.isfinite(float(r.get(f"learners/{policy}/total_loss") or "nan"))
        ]
        assert rows, f"{run}: no iteration reported {policy}'s learner"
        prefix = f"learners/{policy}/reward_signals"
        for name in names:
            # curiosity rewards nothing before its model's first update (ML-Agents'): some row does
            means = [float(row[f"{prefix}/{name}/reward_mean"]) for row in rows]
            assert all(map(math.isfinite, means)) and any(means), (policy, name, means)
            for term in LOSSES.get(name, ()):
                assert math.isfinite(float(rows[-1][f"{prefix}/{name}/{term}"])), (policy, name, term)
        if "extrinsic" not in names:
            assert not rows[-1].get(f"{prefix}/extrinsic/reward_mean")


@pytest.mark.slow
@ON
def test_a_signal_with_another_gamma_is_one_line_before_ray_starts(tmp_path: Path) -> None:
    signals = {"extrinsic": {}, "curiosity": {"strength": 0.1, "gamma": 0.9}}
    experiment = {
        "sac": {"run": "SAC", "env": "Pendulum-v1", "config": {"gamma": 0.95, "reward_signals": signals}}
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(experiment, sort_keys=False))
    out = run_train(["-f", str(path), "--stop-iters", "1", "--local-dir", str(tmp_path / "results")])
    assert out.returncode == 2, out.stderr[-3000:]
    assert (
        "reward_signals.curiosity.gamma is 0.9, the run's gamma 0.95: SAC learns one value of the signals'"
        " summed rewards" in out.stderr
    )
    assert "set its gamma to 0.95, or run: PPO, which has a value head per signal" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    ("run", "config", "said"),
    [
        ("APPO", {"stock": True}, "reward_signals is computed by envsdk's APPO learner, which stock:"),
        ("IMPALA", {"stock": ["impala-learner"]}, "envsdk's IMPALA learner, which stock:"),
        ("SAC", {"stock": ["sac-learner"]}, "envsdk's SAC learner, which stock:"),
        ("DQN", {"stock": True}, "envsdk's DQN learner, which stock:"),
        pytest.param("DQN", {"n_step": 3}, "n_step is 3 with reward_signals", marks=ON),
        pytest.param(
            "APPO", {"num_aggregator_actors_per_learner": 1}, "curiosity reads next observations", marks=ON
        ),
        pytest.param("DQN", {"num_learners": 2}, "num_learners is 2 with reward_signals: DQN's", marks=ON),
        pytest.param("IMPALA", {"num_learners": 3}, "IMPALA's learners would not average", marks=ON),
        pytest.param(
            "IMPALA",
            {
                "reward_signals": {"curiosity": {"gamma": 0.99}},
                "algorithm_config_overrides_per_module": {"p": {"gamma": 0.5}},
            },
            "curiosity.gamma is 0.99, policy p's gamma 0.5",
            marks=ON,
        ),
    ],
)
def test_what_one_value_cannot_take_is_refused(tmp_path: Path, run: str, config: dict, said: str) -> None:
    act = "box" if run == "SAC" else "discrete"
    with pytest.raises(UserError) as caught:
        built_config(tmp_path, run, "box", act, False, **{"reward_signals": {"curiosity": {}}, **config})
    assert said in caught.value.problem


@pytest.mark.parametrize("run", ["BC", "MARWIL", "CQL"])
def test_an_algorithm_whose_learner_takes_no_signals_is_refused_naming_those_that_do(run: str) -> None:
    from ray.rllib.algorithms.registry import ALGORITHMS

    from envsdk.training.build.modules.reward_signals import check_run

    default = ALGORITHMS[run]()[0].get_default_config()
    with pytest.raises(UserError) as caught:
        check_run("reward_signals", run, default, substitutions.Stock(), "exp.yaml:7")
    assert caught.value.problem == (
        "exp.yaml:7: reward_signals trains with the learners of PPO, APPO, IMPALA, SAC, DQN in this"
        f" version; this run is {run}"
    )
    assert caught.value.hint == "use run: PPO or APPO or IMPALA or SAC or DQN, or drop reward_signals"


@pytest.mark.substitution(substitutions.IMPALA_LEARNER)
def test_the_config_gets_the_signals_module_and_no_value_heads(tmp_path: Path) -> None:
    from envsdk.networks.reward_signals import signals_module_id
    from envsdk.training.substitutes.impala.learner import APPOTorchLearner

    signals = {"extrinsic": {"strength": 0.5}, "rnd": {}}
    config = built_config(tmp_path, "APPO", "box", "discrete", False, reward_signals=signals).config
    specs = config.rl_module_spec.rl_module_specs
    assert specs[signals_module_id("default_policy")].learner_only
    assert "value_heads" not in (specs["default_policy"].model_config or {})
    assert config.learner_class is APPOTorchLearner
    given = config.learner_config_dict["reward_signals"]["default_policy"]
    assert [(s["name"], s["strength"]) for s in given] == [("extrinsic", 0.5), ("rnd", 1.0)]
