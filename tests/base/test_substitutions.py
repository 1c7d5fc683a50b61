"""The substitution table (envsdk/substitutions.py): each entry switches off alone, all switch off at
once (stock RLlib underneath), and what is left in the built config is RLlib's own piece.

Each substitution's comparison with RLlib's own code on the same inputs is in the test that
TESTED_BY names; the table and that list must name the same substitutions.
"""

from __future__ import annotations

import gc

import pytest
import yaml

from envsdk import speedups, substitutions
from envsdk.errors import UserError
from tests.helpers import ROOT

# Where each substitution is compared with RLlib's own piece on the same inputs.
TESTED_BY = {
    "batched-sampler": ("test_sampling.py", "test_the_batched_loop_returns_rllibs_episodes"),
    "transition-replay": (
        "test_transition_replay.py",
        "test_the_learner_gets_the_columns_rllibs_episode_path_gives_it",
    ),
    "sac-learner": ("test_sac.py", "test_one_backward_pass_gives_rllibs_gradients"),
    "ppo-learner": ("test_ppo_learner.py", "test_the_learner_shuffles_rllibs_batch_rows_together"),
    "dqn-learner": (
        "test_dqn_learner.py",
        "test_the_learner_builds_rllibs_optimizer_with_the_configs_epsilon",
    ),
    "impala-learner": (
        "test_summed_signals.py",
        "test_rllibs_loss_gets_the_batch_with_only_the_rewards_summed",
    ),
    "sac-module": ("test_sac_module.py", "test_the_lean_pass_gives_rllibs_outputs_losses_and_gradients"),
    "in-process-trial": ("test_trial_runners.py", "test_in_process_and_tune_trials_write_the_same_folder"),
    "env-guard": ("test_env_faults.py", "test_each_space_kind_passes_its_values_and_names_each_fault"),
    "action-input-check": ("test_substitutions.py", "test_the_action_input_check_draws_rllibs_actions"),
    "agent-step-clock": (
        "test_agent_metrics.py",
        "test_schedules_count_agent_steps_and_returns_are_per_agent",
    ),
    "connector-frames": (
        "test_internals.py",
        "test_connectors_find_their_callers_arguments_with_the_cheap_stack",
    ),
    "polyak-in-place": (
        "test_internals.py",
        "test_target_networks_are_blended_in_place_as_rllib_blends_them",
    ),
    "fused-adam": (
        "test_internals.py",
        "test_a_fused_optimizer_makes_the_same_updates_and_loads_an_unfused_state",
    ),
    "finite-check-once": ("test_internals.py", "test_one_sum_finds_every_non_finite_gradient"),
    "frozen-imports": ("test_substitutions.py", "test_frozen_imports_off_leaves_the_collector_alone"),
    "episodes-converted-once": (
        "test_internals.py",
        "test_converting_an_ended_episode_again_changes_nothing",
    ),
    "parallel-envs": ("test_parallel_envs.py", "test_the_async_envs_give_rllibs_episodes"),
    "one-file-per-write": ("test_recording.py", "test_output_then_input_trains_bc"),
    "games-at-once": (
        "test_games_at_once.py",
        "test_the_games_step_at_once_and_give_the_vector_envs_own_results",
    ),
    "agents-batched": ("test_agents_batched.py", "test_each_agent_lives_as_in_rllibs_runner"),
    "poca": ("test_poca.py", "test_the_stock_refusal_is_a_clear_exit_before_ray_starts"),
}


def test_every_substitution_has_its_comparison_test() -> None:
    assert list(TESTED_BY) == list(substitutions.TABLE)
    for file, name in TESTED_BY.values():
        (path,) = (ROOT / "tests").rglob(file)
        assert f"def {name}(" in path.read_text(), (file, name)


def chosen_defaults(built) -> set[str]:  # type: ignore[no-untyped-def]
    """The substitutions of kind "default" a built config carries: values the YAML did not set."""
    chosen = built.config.gym_env_vectorize_mode == "async"
    return {"parallel-envs"} if chosen and "gym_env_vectorize_mode" not in built.user_keys else set()


def in_force(exp, built) -> set[str]:  # type: ignore[no-untyped-def]
    """The substitutions a built config carries, read from the config itself."""
    from envsdk.training.hooks import agent_step_clock, faults
    from envsdk.training.run.in_process import runs_in_process
    from envsdk.training.substitutes.dqn.learner import DQNTorchLearner
    from envsdk.training.substitutes.impala.learner import APPOTorchLearner, IMPALATorchLearner
    from envsdk.training.substitutes.ppo.learner import PPOTorchLearner
    from envsdk.training.substitutes.replay import training_step
    from envsdk.training.substitutes.sac.learner import SACTorchLearner
    from envsdk.training.substitutes.sac.module import LeanSACTorchRLModule
    from envsdk.training.substitutes.sampling import batched_runner

    config = built.config
    found = set()
    if config.env_runner_cls is batched_runner.BatchedEnvRunner:
        found.add("batched-sampler")
    if built.algo_class in training_step.REPLACEMENTS.values():
        found.add("transition-replay")
    learners = {
        SACTorchLearner: "sac-learner",
        PPOTorchLearner: "ppo-learner",
        DQNTorchLearner: "dqn-learner",
        APPOTorchLearner: "impala-learner",
        IMPALATorchLearner: "impala-learner",
    }
    if config.learner_class in learners:
        found.add(learners[config.learner_class])
    if config.rl_module_spec.module_class is LeanSACTorchRLModule:
        found.add("sac-module")
    if runs_in_process(exp, built):
        found.add("in-process-trial")
    created = [getattr(h, "func", h) for h in config.callbacks_on_environment_created or []]
    if faults.guard_env in created:
        found.add("env-guard")
    hooks = {
        "action-input-check": (faults.arm_action_check, config.callbacks_on_episode_created),
        "agent-step-clock": (agent_step_clock.count_agent_steps, config.callbacks_on_algorithm_init),
    }
    found |= {name for name, (hook, given) in hooks.items() if hook in (given or [])}
    found |= chosen_defaults(built)
    for hook in config.callbacks_on_environment_created or []:
        if getattr(hook, "func", hook) is speedups.on_env_runner:
            off = frozenset(getattr(hook, "keywords", {}).get("off", ()))
            found |= set(speedups.wanted(substitutions.Stock(off)))
    return found


def build(monkeypatch, stock, yaml_stock=None, config="pendulum-sac"):  # type: ignore[no-untyped-def]
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    if stock is None:
        monkeypatch.delenv(substitutions.STOCK, raising=False)
    else:
        monkeypatch.setenv(substitutions.STOCK, stock)
    monkeypatch.delenv(substitutions.NO_PATCHES, raising=False)
    (exp,) = load_experiments(ROOT / "configs" / f"{config}.yaml")
    if yaml_stock is not None:
        exp.config["stock"] = yaml_stock
    return exp, build_config(exp)


# pendulum-sac carries every substitution but frozen-imports (train.py's import, not the config's),
# the PPO, DQN and IMPALA learners (cartpole-ppo and cartpole-dqn carry the first two,
# test_summed_signals.py's APPO config the third), the agent-step clock
# (count_steps_by: agent_steps only; test_agent_metrics.py turns it off) and parallel envs (a
# costly env's only: test_parallel_envs.py turns it off), poca (run: POCA only; test_poca.py: stock
# mode refuses it), one-file-per-write (output: only; test_recording.py counts the files) and
# games-at-once and agents-batched (Unity games: test_games_at_once.py and test_agents_batched.py
# run them).
IN_CONFIG = [
    name
    for name in substitutions.TABLE
    if name
    not in (
        "frozen-imports",
        "ppo-learner",
        "dqn-learner",
        "impala-learner",
        "agent-step-clock",
        "parallel-envs",
        "poca",
        "one-file-per-write",
        "games-at-once",
        "agents-batched",
    )
]


def test_by_default_every_substitution_is_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    assert in_force(*build(monkeypatch, None)) == set(IN_CONFIG)


@pytest.mark.parametrize("name", IN_CONFIG)
def test_each_substitution_turns_off_alone(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    assert in_force(*build(monkeypatch, name)) == set(IN_CONFIG) - {name}
    assert in_force(*build(monkeypatch, None, [name])) == set(IN_CONFIG) - {name}  # stock: [name]


@pytest.mark.parametrize(
    ("name", "config"), [("ppo-learner", "cartpole-ppo"), ("dqn-learner", "cartpole-dqn")]
)
def test_ppo_and_dqn_take_their_learners_unless_stock(
    monkeypatch: pytest.MonkeyPatch, name: str, config: str
) -> None:
    assert name in in_force(*build(monkeypatch, None, config=config))
    for stock, yaml_stock in ((name, None), (None, [name]), ("1", None)):
        assert name not in in_force(*build(monkeypatch, stock, yaml_stock, config))


@pytest.mark.parametrize(
    ("stock", "yaml_stock"), [("1", None), (None, True)], ids=["ENVSDK_STOCK=1", "stock: true"]
)
def test_stock_turns_every_substitution_off(monkeypatch: pytest.MonkeyPatch, stock, yaml_stock) -> None:  # type: ignore[no-untyped-def]
    from ray.rllib.algorithms.sac import SAC
    from ray.rllib.algorithms.sac.torch.default_sac_torch_rl_module import DefaultSACTorchRLModule
    from ray.rllib.algorithms.sac.torch.sac_torch_learner import SACTorchLearner

    exp, built = build(monkeypatch, stock, yaml_stock)
    assert in_force(exp, built) == set()
    assert built.algo_class is SAC and built.config.learner_class is SACTorchLearner
    assert built.config.rl_module_spec.module_class is DefaultSACTorchRLModule
    assert built.config.env_runner_cls is None and built.stock.off == set(substitutions.TABLE)


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        (substitutions.STOCK, "fused-adma", "ENVSDK_STOCK names no substitution 'fused-adma'"),
        (substitutions.NO_PATCHES, "batched-sampler", "ENVSDK_NO_PATCHES names no substitution"),
    ],
)
def test_a_switch_naming_no_substitution_is_refused(
    monkeypatch: pytest.MonkeyPatch, variable, value, says
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(variable, value)
    with pytest.raises(UserError, match=says):
        substitutions.off_in_environment()


@pytest.mark.parametrize(
    ("value", "off"),
    [(None, set()), (False, set()), (True, set(substitutions.TABLE)), (["fused-adam"], {"fused-adam"})],
)
def test_the_stock_key(value: object, off: set[str]) -> None:
    assert substitutions.off_in_config(value, "x.yaml:3") == off


@pytest.mark.parametrize("value", [3, {"fused-adam": False}, ["nope"]])
def test_a_bad_stock_key_is_refused_with_its_line(value: object) -> None:
    with pytest.raises(UserError, match=r"x\.yaml:3"):
        substitutions.off_in_config(value, "x.yaml:3")


def test_critic_loss_needs_the_sac_learner(monkeypatch: pytest.MonkeyPatch) -> None:
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config

    monkeypatch.setenv(substitutions.STOCK, "sac-learner")
    (exp,) = load_experiments(ROOT / "configs" / "pendulum-sac.yaml")
    exp.config["critic_loss"] = "squared"
    with pytest.raises(UserError, match="critic_loss 'squared' is computed by envsdk's SAC learner"):
        build_config(exp)
    exp.config["critic_loss"] = "huber"  # RLlib's own: what stock RLlib does anyway
    assert build_config(exp).config.learner_class.__module__.startswith("ray.rllib")


def test_dry_run_lists_the_table_and_stock_lists_none_in_force(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from envsdk.cli.train import main

    for stock, listed in ((None, list(substitutions.TABLE)), ("1", [])):
        if stock is None:
            monkeypatch.delenv(substitutions.STOCK, raising=False)
        else:
            monkeypatch.setenv(substitutions.STOCK, stock)
        assert main(["-f", str(ROOT / "configs" / "cartpole-ppo.yaml"), "--dry-run"]) == 0
        out = capsys.readouterr().out
        doc = yaml.safe_load(out)  # the table is in YAML comments
        assert doc["cartpole-ppo"]["substitutions in force"] == listed
        for name in substitutions.TABLE:
            state = "off" if stock else "on "
            assert f"#   {state}  {name} " in out, (name, out[-3000:])


def test_the_action_input_check_draws_rllibs_actions() -> None:
    """Our GetActions on the same inputs and seed: RLlib's actions and log-probabilities; with a NaN,
    the line that names the policy instead of torch's error."""
    import gymnasium as gym
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.module_to_env import GetActions as RLlibGetActions
    from ray.rllib.env.single_agent_episode import SingleAgentEpisode

    from envsdk.training.hooks.faults import GetActions, PolicyDiverged

    env = gym.make("CartPole-v1")
    module = PPOConfig().environment("CartPole-v1").get_rl_module_spec(env=env).build()
    inputs = torch.randn(6, 2)
    drawn = []
    for cls in (RLlibGetActions, GetActions):
        torch.manual_seed(0)
        piece = cls(env.observation_space, env.action_space)
        batch = {"action_dist_inputs": inputs.clone()}
        drawn.append(piece(rl_module=module, batch=batch, episodes=[SingleAgentEpisode()], explore=True))
    assert torch.equal(drawn[0]["actions"], drawn[1]["actions"])
    assert torch.equal(drawn[0]["action_logp"], drawn[1]["action_logp"])
    inputs[2, 1] = float("nan")
    with pytest.raises(PolicyDiverged, match="policy 'default_policy' produced NaN"):
        GetActions(env.observation_space, env.action_space)(
            rl_module=module, batch={"action_dist_inputs": inputs}, episodes=[SingleAgentEpisode()]
        )


@pytest.mark.parametrize("stock", [None, "frozen-imports"])
def test_frozen_imports_off_leaves_the_collector_alone(
    monkeypatch: pytest.MonkeyPatch, stock: str | None
) -> None:
    if stock is None:
        monkeypatch.delenv(substitutions.STOCK, raising=False)
    else:
        monkeypatch.setenv(substitutions.STOCK, stock)
    before = gc.get_freeze_count()
    try:
        with speedups.untracked_imports(substitutions.Stock.resolve()):
            kept = [object() for _ in range(100)]
            assert gc.isenabled() == (stock is not None)
        assert (gc.get_freeze_count() > before) == (stock is None), kept[:0]
    finally:
        gc.unfreeze()


@pytest.mark.parametrize("switch", [substitutions.STOCK, substitutions.NO_PATCHES])
def test_the_switches_reach_a_joined_clusters_workers(monkeypatch: pytest.MonkeyPatch, switch: str) -> None:
    """train.py --ray-address: the workers' runtime env carries the driver's switches."""
    from envsdk.cluster.ray_session import workers_env_vars

    monkeypatch.delenv(substitutions.STOCK, raising=False)
    monkeypatch.delenv(substitutions.NO_PATCHES, raising=False)
    assert workers_env_vars("/a") == {"PYTHONPATH": "/a"}
    monkeypatch.setenv(switch, "fused-adam")
    assert workers_env_vars("/a") == {"PYTHONPATH": "/a", switch: "fused-adam"}


# Each route to stock RLlib, in a process of its own: a command of train.py or rollout.py (argv[1]),
# then what the process holds after it: the patched RLlib objects that are envsdk's (PATCHED of
# test_internals.py, by where their code lives), gc's frozen objects and its freezes (frozen-imports:
# train.py's import of RLlib), and the substitutions the built (or restored) config carries.
STOCK_PROBE = """
import gc, importlib, json, os, sys
from envsdk.cli import rollout, train
freezes, freeze = [], gc.freeze
gc.freeze = lambda: freezes.append(1) or freeze()
tool, args = sys.argv[1], json.loads(sys.argv[2])
assert {"train": train.main, "rollout": rollout.main}[tool](args) == 0
def ours(module, path):
    value = importlib.import_module(module)
    for part in path.split("."):
        value = getattr(value, part)
    code = getattr(value, "__code__", None)
    return type(value).__module__.startswith("envsdk") or (code is not None and "envsdk" in code.co_filename)
patched = sorted(name for name, where in json.loads(sys.argv[3]).items() if ours(*where))
found = []
if tool == "train":
    from envsdk.config.experiment import load_experiments
    from envsdk.training.build import build_config
    from tests.base.test_substitutions import in_force
    exp = load_experiments(args[1])[0]
    found = sorted(in_force(exp, build_config(exp)))
else:
    from envsdk.evaluation.restore import load
    from envsdk.training.run.checkpoints import locate
    config = load(locate(args[0]).checkpoint).config
    classes = (config.learner_class, config.env_runner_cls)  # RLlib's, or None: RLlib's default
    found = [c.__module__ for c in classes if c is not None and "envsdk" in c.__module__]
frozen = gc.get_freeze_count()
print(json.dumps({"patched": patched, "frozen": frozen, "freezes": len(freezes), "in_force": found}))
"""


def stock_probe(tool: str, args: list[str], **environment: str) -> dict:
    """STOCK_PROBE's findings after ``tool`` ran with ``args`` in an environment without the switches
    but ``environment``."""
    import json
    import os
    import subprocess
    import sys

    from tests.base.test_internals import PATCHED

    env = {k: v for k, v in os.environ.items() if k not in (substitutions.STOCK, substitutions.NO_PATCHES)}
    out = subprocess.run(
        [sys.executable, "-c", STOCK_PROBE, tool, json.dumps(args), json.dumps(PATCHED)],
        capture_output=True, text=True, env={**env, **environment}, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


NOTHING = {"patched": [], "frozen": 0, "freezes": 0, "in_force": []}


def stock_yaml(folder, **stop) -> str:  # type: ignore[no-untyped-def]
    """cartpole-ppo with ``stock: true`` in its config, written to ``folder``."""
    (doc,) = yaml.safe_load((ROOT / "configs" / "cartpole-ppo.yaml").read_text()).values()
    doc["config"]["stock"] = True
    doc["stop"] = stop or doc["stop"]
    path = folder / "stock.yaml"
    path.write_text(yaml.safe_dump({"cartpole-ppo": doc}))
    return str(path)


def test_the_environments_switch_leaves_no_substitution(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = str(ROOT / "configs" / "cartpole-ppo.yaml")
    assert stock_probe("train", ["-f", config, "--dry-run"], **{substitutions.STOCK: "1"}) == NOTHING
    # the control: without the switch, the probe finds every one that train.py puts in this process
    found = stock_probe("train", ["-f", config, "--dry-run"])
    assert found["frozen"] > 0 and found["freezes"] == 1 and set(found["patched"]) == set(speedups.SPEEDUPS)


def test_stock_in_a_yaml_leaves_no_substitution(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``stock: true`` reaches train.py's import of RLlib too: the collector is left alone, no freeze."""
    assert stock_probe("train", ["-f", stock_yaml(tmp_path), "--dry-run"]) == NOTHING


@pytest.mark.slow  # trains
def test_a_checkpoint_trained_with_stock_rolls_out_with_no_substitution(tmp_path, ray_address) -> None:  # type: ignore[no-untyped-def]
    from tests.helpers import run_train

    results = tmp_path / "results"
    # stock: its trial is a Tune trial, on the session's Ray (no Ray start of its own)
    args = ["-f", stock_yaml(tmp_path, training_iteration=1), "--local-dir", str(results)]
    done = run_train([*args, "--ray-address", ray_address])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    args = [str(results / "cartpole-ppo"), "--episodes", "1", "--no-out"]
    # rollout.py reads the run's stock: once RLlib is imported: what that import froze is handed back
    assert stock_probe("rollout", args) == {**NOTHING, "freezes": 1}


COMMAND_WINS = """
import importlib, json, sys
from envsdk import speedups
from envsdk.substitutions import Stock
patched = json.loads(sys.argv[1])
def get(module, path):
    value = importlib.import_module(module)
    for part in path.split("."):
        value = getattr(value, part)
    return value
before = {name: get(*where) for name, where in patched.items()}
speedups.install_for_command(Stock(frozenset(patched)))  # the command: every patch off
speedups.on_env_runner()  # then an experiment of its file without stock: builds an env runner here
print(json.dumps(sorted(name for name, where in patched.items() if get(*where) is not before[name])))
"""


def test_an_experiment_without_stock_leaves_the_commands_stock_alone_in_its_process():
    """A file with a stock experiment and one without: the command turns the patches off for its
    process, and the other experiment's ``on_environment_created`` hook there installs none."""
    import json
    import subprocess
    import sys

    from tests.base.test_internals import PATCHED

    out = subprocess.run(
        [sys.executable, "-c", COMMAND_WINS, json.dumps(PATCHED)], capture_output=True, text=True, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == []
