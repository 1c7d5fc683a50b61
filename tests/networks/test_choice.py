"""What train.py says of each policy's network before it trains: ``use_lstm`` given to a custom
RLModule that keeps no memory (under ``model_config:``, or Ray 1.x's ``model:`` beside
``custom_model``) is named in a notice, as the module then runs without memory; the default model
takes it and says so in its line."""

from __future__ import annotations

import pytest

from tests.helpers import built_config

NO_MEMORY = "model_config.use_lstm: the custom RLModule tinynet"
CUSTOM = {"custom_model": "tinynet"}


@pytest.mark.parametrize(
    ("model", "model_config", "said"),
    [
        (CUSTOM, {"use_lstm": True}, True),
        ({**CUSTOM, "use_lstm": True}, {}, True),  # Ray 1.x's place: beside custom_model
        (CUSTOM, {"use_lstm": False}, False),
        ({}, {"use_lstm": True}, False),
    ],
    ids=["custom-model_config", "custom-model", "custom-no-lstm", "default"],
)
def test_use_lstm_on_a_module_without_memory_is_named(tmp_path, capsys, model, model_config, said):
    built = built_config(
        tmp_path, "PPO", "box", "discrete", False, minibatch_size=16, model=model, model_config=model_config
    )
    err = capsys.readouterr().err
    assert (NO_MEMORY in err) == said, err
    if said:  # one line naming the fix, and the module indeed has no memory
        (line,) = [x for x in err.splitlines() if NO_MEMORY in x]
        assert "is_stateful() is False" in line and "drop it" in line
    (line,) = built.models  # the policy's line: the default model names its LSTM
    assert ("LSTM" in line) == (not model), line
