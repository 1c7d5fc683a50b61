"""The DQN learner (envsdk/training/substitutes/dqn/learner.py) against RLlib's: the same optimizer, with the
config's ``adam_epsilon``, which RLlib 2.60's learner leaves unused."""

from __future__ import annotations

from typing import Any

import pytest
from ray.rllib.algorithms.dqn.torch.dqn_torch_learner import DQNTorchLearner as RLlibDQNTorchLearner
from ray.rllib.core import DEFAULT_MODULE_ID

from envsdk import internals
from envsdk.training.substitutes.dqn.learner import DQNTorchLearner
from tests.helpers import built_algorithm, built_config


def _optimizers(tmp_path: Any, **config: Any) -> list[tuple[str, dict[str, Any], list[tuple[int, ...]]]]:
    """Each optimizer of the built algorithm's learner: its name, settings and parameter shapes."""
    with internals.without_object_store():
        algo = built_algorithm(tmp_path, "DQN", "box", "discrete", False, **config)
        try:
            learner = internals.local_learner(algo.learner_group)
            found = []
            for name, optim in learner.get_optimizers_for_module(DEFAULT_MODULE_ID):
                (group,) = optim.param_groups
                settings = {k: v for k, v in group.items() if k != "params"}
                found.append((name, settings, [tuple(p.shape) for p in group["params"]]))
            return found
        finally:
            algo.stop()


@pytest.mark.slow  # builds Algorithms
@pytest.mark.substitution("dqn-learner")
def test_the_learner_builds_rllibs_optimizer_with_the_configs_epsilon(tmp_path: Any) -> None:
    """RLlib's learner leaves adam_epsilon unused (when this fails, RLlib reads it and dqn-learner can
    go); ours builds the same optimizer, over the same weights, with that epsilon."""
    ours = _optimizers(tmp_path, adam_epsilon=1.5e-4)
    rllib = _optimizers(tmp_path, adam_epsilon=1.5e-4, stock=["dqn-learner"])
    assert [settings["eps"] for _, settings, _ in rllib] == [1e-8]
    assert [settings["eps"] for _, settings, _ in ours] == [1.5e-4]
    for (name, settings, shapes), (rllib_name, rllib_settings, rllib_shapes) in zip(ours, rllib, strict=True):
        assert (name, shapes) == (rllib_name, rllib_shapes)
        assert {**settings, "eps": None} == {**rllib_settings, "eps": None}
    # adam_epsilon left at its default: RLlib's optimizer, setting for setting
    assert _optimizers(tmp_path) == _optimizers(tmp_path, stock=["dqn-learner"])


@pytest.mark.substitution("dqn-learner")
def test_only_rllibs_dqn_learner_is_replaced(tmp_path: Any) -> None:
    ours = built_config(tmp_path, "DQN", "box", "discrete", False).config
    assert ours.learner_class is DQNTorchLearner
    stock = built_config(tmp_path, "DQN", "box", "discrete", False, stock=["dqn-learner"]).config
    assert stock.learner_class is RLlibDQNTorchLearner
    sac = built_config(tmp_path, "SAC", "box", "box", False).config  # SAC's learner derives from DQN's
    assert not issubclass(sac.learner_class, DQNTorchLearner)


@pytest.mark.substitution("dqn-learner")
def test_an_unused_adam_epsilon_is_named(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """With RLlib's learner (stock), a set adam_epsilon is named as unused; with ours, nothing is said."""
    built_config(tmp_path, "DQN", "box", "discrete", False, adam_epsilon=2.5e-4)
    assert "adam_epsilon" not in capsys.readouterr().err
    built_config(tmp_path, "DQN", "box", "discrete", False, adam_epsilon=3.5e-4, stock=["dqn-learner"])
    err = capsys.readouterr().err
    assert (
        "notice: config key 'adam_epsilon' is not read on RLlib 2.60's new API stack: RLlib's DQN learner"
        " builds Adam with torch's epsilon (1e-8); envsdk's (dqn-learner) reads it"
    ) in err
