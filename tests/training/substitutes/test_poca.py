"""run: POCA: the group view a member's rows get (groupmates present, absent, gone), the critic's
value and counterfactual baseline, credit after leaving the group, and the build's refusals.

Episodes are RLlib's own MultiAgentEpisode, stepped through its API and extended by its own
AddOneTsToEpisodesAndTruncate, as the learner connector hands them to POCA's piece."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
import tree
import yaml
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.connectors.learner import AddOneTsToEpisodesAndTruncate
from ray.rllib.core.columns import Columns
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.evaluation.postprocessing import Postprocessing

from envsdk import substitutions
from envsdk.config.experiment import load_experiments
from envsdk.errors import UserError
from envsdk.networks.poca import GroupCriticModule, critic_module_id, encode_actions
from envsdk.training.build import build_config
from envsdk.training.substitutes.poca.groups import (
    ABSENT,
    OTHERS,
    OTHERS_ACTIONS,
    GroupAdvantages,
    group_view,
    members_of,
)
from envsdk.training.substitutes.poca.learner import POCATorchLearner
from tests.helpers import ROOT, built_config, progress_rows, rollout_here, run_train, trial_dirs

# POCA is envsdk's (and reads mlagents-learn's clip schedule through envsdk's PPO learner): on in the
# stock-mode run of the suite too, where a test turns it off itself
pytestmark = pytest.mark.substitution(substitutions.POCA, substitutions.PPO_LEARNER)

OBS = gym.spaces.Box(-1.0, 3.0, (2,), np.float32)
ACT = gym.spaces.Discrete(3)
WAIT, PRESS, PUSH = 0, 1, 2


def _obs(step: float, agent: str = "a") -> np.ndarray:
    """An observation that says the env step and the agent."""
    return np.array([step, "abc".index(agent)], np.float32)


def relay_episode(
    group_ids: dict[str, int] | None = None, escape: bool = True, pressed: float = 0.0, unity: bool = False
) -> MultiAgentEpisode:
    """Three agents: c presses at step 1 (its own reward: ``pressed``) and leaves; a and b push at
    step 2 (+1 each for the group when ``escape``: the group's end) or the chunk is cut there (the
    group goes on).  The group reward is in the infos; ``unity``: in the rewards too, as a Unity
    game's are."""
    ids = group_ids or {k: 1 for k in "abc"}
    ep = MultiAgentEpisode(observation_space={k: OBS for k in "abc"}, action_space={k: ACT for k in "abc"})
    ep.add_env_reset(
        observations={k: _obs(0, k) for k in "abc"}, infos={k: {"group_id": ids[k]} for k in "abc"}
    )
    ep.add_env_step(
        observations={k: _obs(1, k) for k in "abc"},
        actions={"a": WAIT, "b": WAIT, "c": PRESS},
        rewards={"a": 0.0, "b": 0.0, "c": pressed},
        infos={k: {"group_id": ids[k]} for k in "abc"},
        terminateds={"c": True, "__all__": False},
        truncateds={"__all__": False},
    )
    reward = 1.0 if escape else 0.0
    ep.add_env_step(
        observations={k: _obs(2, k) for k in "ab"},
        actions={"a": PUSH, "b": PUSH},
        rewards={"a": reward if unity else 0.0, "b": reward if unity else 0.0},
        infos={k: {"group_id": ids[k], "group_reward": reward} for k in "ab"},
        terminateds={"a": escape, "b": escape, "__all__": escape},
        truncateds={"__all__": False},
    )
    ep.to_numpy()
    AddOneTsToEpisodesAndTruncate()(rl_module=None, batch={}, episodes=[ep], shared_data={})
    return ep


def views(ep: MultiAgentEpisode, groups=None):
    members = [m for m, _ in members_of(ep, groups, from_infos=False)]
    return {m.agent_id: (m, group_view(m, members)) for m in members}


def test_each_row_sees_its_groupmates_latest_step_and_a_member_that_left_is_absent_after_it():
    found = views(relay_episode())
    a, view = found["a"]
    assert list(a.steps) == [0, 1, 2] and a.left
    assert [o.agent_id for o in view.others] == ["b", "c"]
    # c observed at steps 0 and 1 (its last: it left there): present up to step 1, gone at step 2
    assert view.present.tolist() == [[True, True], [True, True], [True, False]]
    # c's action is known at its step 0 (it pressed), not at the step it left; b's at 0 and 1
    assert view.acted.tolist() == [[True, True], [True, False], [False, False]]
    assert view.index[:, 1].tolist() == [0, 1, 1]


def test_a_member_that_left_while_its_group_goes_on_is_not_at_a_terminal_state():
    found = views(relay_episode())
    assert found["c"][1].group_goes_on  # a and b stayed after it
    assert not found["a"][1].group_goes_on  # the group ended with a and b


def test_groups_come_from_the_infos_or_the_config_and_other_groups_are_not_seen():
    found = views(relay_episode({"a": 1, "b": 1, "c": 2}))
    assert [o.agent_id for o in found["a"][1].others] == ["b"]
    assert found["c"][1].others == [] and not found["c"][1].group_goes_on
    configured = views(relay_episode({"a": 0, "b": 0, "c": 0}), groups={"a": "x", "b": "y", "c": "x"})
    assert [o.agent_id for o in configured["a"][1].others] == ["c"]


def _critic(hidden: int = 16) -> GroupCriticModule:
    torch.manual_seed(0)
    return GroupCriticModule(
        observation_space=OBS,
        action_space=ACT,
        learner_only=True,
        model_config={"hidden_units": hidden, "num_layers": 2},
    )


def _members(rows: int, k: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand((rows, 2), generator=g)
    others = torch.rand((rows, k, 2), generator=g)
    actions = encode_actions(ACT, torch.randint(0, 3, (rows * k,), generator=g)).reshape(rows, k, 3)
    return obs, others, actions


def test_the_baseline_reads_the_others_actions_and_the_value_reads_none():
    critic = _critic()
    obs, others, actions = _members(8, 2)
    absent = torch.zeros(8, 2)
    changed = torch.roll(actions, 1, dims=-1)  # every other member chose differently
    with torch.no_grad():
        assert not torch.allclose(
            critic.baselines(obs, others, actions, absent), critic.baselines(obs, others, changed, absent)
        )
        value = critic.values(obs, others, absent)
        assert value.shape == (8,)
        # the value is the group's: the same whichever member's row reads it
        swapped = torch.cat([others[:, :1], obs[:, None]], dim=1)
        assert torch.allclose(value, critic.values(others[:, 1], swapped, absent), atol=1e-5)


@pytest.mark.parametrize("extra", [1, 3])
def test_absent_slots_change_nothing_whatever_they_hold_and_the_order_of_members_neither(extra):
    critic = _critic()
    obs, others, actions = _members(6, 2, seed=1)
    absent = torch.zeros(6, 2)
    _, junk, junk_actions = _members(6, extra, seed=2)
    padded = torch.cat([others, junk * 50], dim=1)
    padded_actions = torch.cat([actions, junk_actions], dim=1)
    padded_absent = torch.cat([absent, torch.ones(6, extra)], dim=1)
    with torch.no_grad():
        critic.eval()
        for estimate in (
            lambda o, a, m: critic.values(obs, o, m),
            lambda o, a, m: critic.baselines(obs, o, a, m),
        ):
            plain = estimate(others, actions, absent)
            assert torch.allclose(plain, estimate(padded, padded_actions, padded_absent), atol=1e-5)
            assert torch.allclose(plain, estimate(others.flip(1), actions.flip(1), absent), atol=1e-5)


class Modules(dict):
    """The piece reads modules by id, as from a MultiRLModule."""


def _targets(escape: bool, pressed: float = 0.0, unity: bool = False) -> dict[str, np.ndarray]:
    """POCA's value targets per agent on the relay episode, the critic's value fixed at 0.5."""
    critic = _critic()
    with torch.no_grad():
        critic.value.weight.zero_()
        critic.value.bias.fill_(0.5)
    ep = relay_episode(escape=escape, pressed=pressed, unity=unity)
    order = [sa.agent_id for sa in GroupAdvantages.single_agent_episode_iterator([ep], False)]  # RLlib's
    lens = {k: len(ep.agent_episodes[k]) for k in order}
    obs = np.concatenate([ep.agent_episodes[k].get_observations(slice(0, lens[k])) for k in order])
    rewards = np.concatenate(
        [np.array(ep.agent_episodes[k].get_rewards(slice(0, lens[k])), np.float32) for k in order]
    )
    mask = np.concatenate([[True] * (lens[k] - 1) + [False] for k in order])
    batch = {"p": {Columns.OBS: obs, Columns.REWARDS: rewards, Columns.LOSS_MASK: mask}}
    for sa in ep.agent_episodes.values():
        sa.module_id = "p"
    piece = GroupAdvantages(gamma=0.9, lambda_=0.95, groups=None, group_reward_from_infos=not unity)
    modules = Modules({"p": None, critic_module_id("p"): critic})
    out = piece(rl_module=modules, episodes=[ep], batch=batch)
    targets = out["p"][Postprocessing.VALUE_TARGETS].numpy()
    starts = np.cumsum([0] + [lens[k] for k in order])
    assert set(out[critic_module_id("p")]) >= {OTHERS, OTHERS_ACTIONS, ABSENT, Postprocessing.ADVANTAGES} - {
        Postprocessing.ADVANTAGES
    }
    return {k: targets[starts[i] : starts[i + 1]] for i, k in enumerate(order)}


def test_a_member_that_left_gets_the_groups_value_after_it_and_the_group_end_stops_the_others():
    targets = _targets(escape=True)
    # c left at step 1 with nothing: its return bootstraps from the group's value there (0.9 x 0.5)
    assert targets["c"][0] == pytest.approx(0.45)
    # a and b: the group reward of +1 (from the infos) ends the group, nothing bootstrapped after it
    assert targets["a"][1] == pytest.approx(1.0) and targets["b"][1] == pytest.approx(1.0)
    assert targets["a"][0] == pytest.approx(0.9 * (0.05 * 0.5 + 0.95 * 1.0))


def test_a_chunk_cut_while_the_group_plays_on_bootstraps_every_member():
    targets = _targets(escape=False)
    assert targets["a"][1] == pytest.approx(0.45) and targets["c"][0] == pytest.approx(0.45)


RELAY = Path(__file__).resolve().parents[2] / "data" / "envs" / "relay_env.py"


def _relay_experiment(tmp_path: Path, **config: Any) -> Path:
    shutil.copy(RELAY, tmp_path / "relay_env.py")
    settings = {
        "run": "POCA",
        "env": "relay_env.RelayEnv",
        "stop": {"training_iteration": 4},
        "config": {
            "groups": {"a": "team", "b": "team", "c": "team"},
            "num_env_runners": 0,
            "train_batch_size": 240,
            "minibatch_size": 80,
            "num_epochs": 2,
            "lr": 0.003,
            "model_config": {"fcnet_hiddens": [16, 16]},
            "seed": 1,
            **config,
        },
    }
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump({"relay": settings}))
    return path


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ({"stock": True}, "run: POCA is envsdk's (RLlib has no MA-POCA)"),
        ({"reward_signals": {"curiosity": {}}}, "reward_signals curiosity with run: POCA"),
        ({"model_config": {"use_lstm": True}}, "run: POCA with a recurrent policy"),
        ({"reward_signals": {"extrinsic": {"strength": 0.5}}}, "the env's reward at another strength"),
    ],
)
def test_what_poca_does_not_train_with_is_refused_before_anything_starts(tmp_path, config, said):
    (exp,) = load_experiments(_relay_experiment(tmp_path, **config))
    with pytest.raises(UserError) as caught:
        build_config(exp)
    assert said in caught.value.problem


def test_mlagents_learns_default_clip_schedule_builds_for_the_policy_and_its_critic(tmp_path):
    """mlagents-learn's epsilon_schedule (linear, its default) becomes a clip_param schedule: POCA's
    learner reads it for the policy's clip and the critic's trust region alike."""
    (exp,) = load_experiments(_relay_experiment(tmp_path, clip_param=[[0, 0.2], [1000, 0.1]]))
    built = build_config(exp)
    assert built.config.learner_config_dict["clip_param_schedule"] == [[0, 0.2], [1000, 0.1]]


def test_poca_on_a_single_agent_env_is_refused_naming_ppo(tmp_path):
    with pytest.raises(UserError) as caught:
        built_config(tmp_path, "POCA", "box", "discrete", False)
    assert "multi-agent env" in caught.value.problem and "run: PPO" in caught.value.hint


def test_the_stock_refusal_is_a_clear_exit_before_ray_starts(tmp_path):
    path = _relay_experiment(tmp_path)
    refused = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), "-f", str(path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "ENVSDK_STOCK": "1"},
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr and "run: POCA is envsdk's" in refused.stderr
    assert "Started a local Ray instance" not in refused.stdout + refused.stderr


@pytest.mark.slow
def test_a_group_trains_checkpoints_rolls_out_and_exports_its_policy(tmp_path):
    """RelayEnv gives its group reward in the infos only: read (the default), the critic's values rise
    towards the escapes' returns; ignored (group_reward_from_infos: false), every reward is 0 and
    they do not.  Both experiments in one train.py run."""
    read = yaml.safe_load(_relay_experiment(tmp_path).read_text())["relay"]
    ignored = yaml.safe_load(_relay_experiment(tmp_path, group_reward_from_infos=False).read_text())["relay"]
    (tmp_path / "both.yaml").write_text(yaml.safe_dump({"read": read, "ignored": ignored}))
    out = run_train(["-f", "both.yaml", "--local-dir", str(tmp_path / "results")], cwd=tmp_path, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    critic = "learners/shared_policy@poca_critic/"
    values = {}
    for name, trial in ((t.parent.name, t) for t in trial_dirs(tmp_path / "results")):
        rows = progress_rows(trial)
        values[name] = [float(r[critic + "value_mean"]) for r in rows]
        for term in ("value_loss", "baseline_loss", "baseline_mean", "value_explained_var"):
            assert np.isfinite(float(rows[-1][critic + term])), term
        if name == "read":
            (checkpoint,) = sorted(trial.glob("checkpoint_*"))[-1:]
    # read: the escapes' returns (about 0.9) pull the values up; ignored: only the values themselves
    # (every reward 0), which stay about where the critic's first weights put them
    assert values["read"][-1] > 0.5 and values["read"][-1] - values["ignored"][-1] > 0.5, values
    onnx = tmp_path / "policy.onnx"
    played = rollout_here(str(checkpoint), "--episodes", "2", "--no-out", "--export-onnx", str(onnx))
    assert played.returncode == 0, played.stderr[-3000:]
    assert "2 episodes" in played.stdout and onnx.stat().st_size > 0


@pytest.mark.parametrize("unity", [False, True], ids=["group-reward-in-infos", "group-reward-in-rewards"])
def test_every_member_counts_its_groupmates_own_rewards_as_ml_agents_sums_them(unity):
    """c's own 0.5 for pressing counts for a and b at that step too (ML-Agents' POCA adds the
    groupmates' rewards); the group's +1 counts once, wherever the env gives it."""
    targets = _targets(escape=True, pressed=0.5, unity=unity)
    assert targets["c"][0] == pytest.approx(0.5 + 0.45)
    later = 0.9 * (0.05 * 0.5 + 0.95 * 1.0)
    assert targets["a"][0] == pytest.approx(0.5 + later) and targets["b"][0] == pytest.approx(0.5 + later)
    assert targets["a"][1] == pytest.approx(1.0)


IMAGE = gym.spaces.Box(0, 255, (12, 12, 3), np.uint8)
SPACES = {
    "vector": (gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Discrete(3)),
    "camera-and-vector": (
        gym.spaces.Dict({"camera": IMAGE, "vector": gym.spaces.Box(-1.0, 1.0, (3,), np.float32)}),
        gym.spaces.MultiDiscrete([3, 2]),
    ),
    "masked": (
        gym.spaces.Dict(
            {
                "observations": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
                "action_mask": gym.spaces.Box(0, 1, (5,), np.int8),
            }
        ),
        gym.spaces.MultiDiscrete([3, 2]),
    ),
    "continuous": (gym.spaces.Box(-1.0, 1.0, (4,), np.float32), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)),
}


def _stacked(space: gym.Space, shape: tuple[int, ...], seed: int) -> Any:
    space.seed(seed)
    rows = [space.sample() for _ in range(int(np.prod(shape)))]
    return tree.map_structure(
        lambda *xs: torch.as_tensor(np.stack(xs)).reshape(*shape, *np.shape(xs[0])), *rows
    )


@pytest.mark.parametrize("kind", list(SPACES))
def test_the_critic_reads_any_observation_the_default_models_read(kind):
    """Vectors, cameras with vectors (a Dict), masked observations, continuous actions: one value per
    row, finite; absent members' contents change nothing."""
    obs_space, act_space = SPACES[kind]
    critic = GroupCriticModule(
        observation_space=obs_space, action_space=act_space, learner_only=True,
        model_config={"hidden_units": 16, "num_layers": 1},
    )  # fmt: skip
    critic.eval()
    obs, others = _stacked(obs_space, (5,), 1), _stacked(obs_space, (5, 2), 2)
    other_others = _stacked(obs_space, (5, 2), 3)
    actions = encode_actions(act_space, _stacked(act_space, (10,), 4)).reshape(5, 2, -1)
    absent = torch.tensor([[0.0, 1.0]] * 5)
    with torch.no_grad():
        values = critic.values(obs, others, absent)
        baselines = critic.baselines(obs, others, actions, absent)
        assert values.shape == baselines.shape == (5,)
        assert torch.isfinite(values).all() and torch.isfinite(baselines).all()
        # slot 1 is absent: what it holds does not matter; slot 0 is present: it does
        mixed = tree.map_structure(lambda a, b: torch.stack([a[:, 0], b[:, 1]], dim=1), others, other_others)
        assert torch.allclose(values, critic.values(obs, mixed, absent), atol=1e-5)
        assert not torch.allclose(values, critic.values(obs, other_others, absent), atol=1e-5)


def test_rows_follow_rllibs_order_of_agents_whatever_the_episodes_dict_holds():
    """RLlib lays a multi-agent episode's rows out in its agent_ids' order (a set); each row's
    groupmates are the others, never itself, whatever order the agents were first seen in."""
    ep = relay_episode()
    critic = _critic()
    order = list(GroupAdvantages.single_agent_episode_iterator([ep], agents_that_stepped_only=False))
    lens = {sa.agent_id: len(sa) for sa in order}
    obs = np.concatenate([sa.get_observations(slice(0, lens[sa.agent_id])) for sa in order])
    rewards = np.concatenate(
        [np.array(sa.get_rewards(slice(0, lens[sa.agent_id])), np.float32) for sa in order]
    )
    batch = {"p": {Columns.OBS: obs, Columns.REWARDS: rewards}}
    for sa in order:
        sa.module_id = "p"
    piece = GroupAdvantages(gamma=0.9, lambda_=0.95, groups=None, group_reward_from_infos=True)
    out = piece(rl_module=Modules({"p": None, critic_module_id("p"): critic}), episodes=[ep], batch=batch)
    rows = out[critic_module_id("p")]
    own = np.asarray(rows[Columns.OBS])
    seen = np.asarray(rows[OTHERS])
    absent = np.asarray(rows[ABSENT]).astype(bool)
    starts = np.cumsum([0] + [lens[sa.agent_id] for sa in order])
    for i, sa in enumerate(order):
        mine = slice(starts[i], starts[i + 1])
        me = "abc".index(sa.agent_id)
        assert (own[mine, 1] == me).all() and (own[mine, 0] == np.arange(lens[sa.agent_id])).all()
        assert (seen[mine, :, 1] != me).all()  # never itself among its groupmates
        present = ~absent[mine]
        assert (seen[mine, :, 0][present] <= np.repeat(own[mine, 0], 2).reshape(-1, 2)[present]).all()
        assert present[0].sum() == 2  # at the first step both others are there


@pytest.mark.parametrize("lookback", [1, 2])
def test_an_agent_first_seen_after_a_chunk_cut_is_placed_at_its_own_env_steps(lookback):
    """RLlib pads a newcomer's env-step mapping by the episode's whole env_t, not the chunk's: b joins
    at env step 5 of an episode cut at step 3; each row sees the other at its own step, never later."""
    ep = MultiAgentEpisode(observation_space={k: OBS for k in "ab"}, action_space={k: ACT for k in "ab"})
    ep.add_env_reset(observations={"a": _obs(0, "a")})
    for t in range(1, 9):
        obs = {"a": _obs(t, "a"), **({"b": _obs(t, "b")} if t >= 5 else {})}
        ep.add_env_step(
            observations=obs,
            actions={k: WAIT for k in obs if k == "a" or t > 5},
            rewards={k: 0.0 for k in obs},
        )
        if t == 3:
            ep = ep.cut(len_lookback_buffer=lookback)
    ep.to_numpy()
    AddOneTsToEpisodesAndTruncate()(rl_module=None, batch={}, episodes=[ep], shared_data={})
    members = [m for m, _ in members_of(ep, {"a": 1, "b": 1}, from_infos=False)]
    start = ep.env_t_started
    for member in members:
        assert member.steps.tolist() == (np.asarray(member.obs)[:, 0] - start).astype(int).tolist()
        view = group_view(member, members)
        (other,) = view.others
        at = np.asarray(other.obs)[view.index[:, 0], 0] - start
        present = view.present[:, 0]
        assert (at[present] <= member.steps[present]).all()  # nothing from the future
        assert (present == (member.steps >= 5 - start)).all() if member.agent_id == "a" else present.all()


def test_a_critic_learns_where_its_policy_does():
    """policies_to_train names policies (self-play always gives the list): each critic follows its own."""

    class Deciding(POCATorchLearner):
        def __init__(self) -> None:  # only the config, which RLlib's decision reads
            self.config = PPOConfig().multi_agent(
                policies={"P", "Q"}, policy_mapping_fn=lambda a, *_, **__: "P", policies_to_train=["P"]
            )

    learner = Deciding()
    assert learner.should_module_be_updated(critic_module_id("P"))
    assert not learner.should_module_be_updated(critic_module_id("Q"))
