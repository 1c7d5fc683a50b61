"""RLlib's checkpoint layout and private config fields, as files and dicts show them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# RLlib's checkpoint layout (Checkpointable.save_to_path; tests/base/test_internals.py reads checkpoints
# that RLlib wrote).  Each component is a folder with class_and_ctor_args.pkl ({"class": ...,
# "ctor_args_and_kwargs": ...}) and state.pkl (its get_state()); the env runner's env-to-module
# connector pieces too.
CHECKPOINT_MARKER = "rllib_checkpoint.json"
ENV_RUNNER_DIR = "env_runner"
MODULE_DIR = Path("learner_group") / "learner" / "rl_module"  # a folder per module id
MODULE_STATE_FILE = "module_state.pkl"
ALGORITHM_STATE_FILE = "algorithm_state.pkl"  # the old API stack's whole state, config included
CONNECTOR_DIRS = ("env_to_module_connector", "module_to_env_connector")
ENV_TO_MODULE_PIECES = (ENV_RUNNER_DIR, CONNECTOR_DIRS[0])
PIECE_CLASS_FILE = "class_and_ctor_args.pkl"
PIECE_STATE_FILE = "state.pkl"
# What a SingleAgentEpisode's state keeps of the wall clock (differs from run to run).
EPISODE_CLOCKS = ("_start_time", "_last_step_time")
# AlgorithmConfig.to_dict() (and so Tune's params.json) keeps model_config under its private field.
MODEL_CONFIG_FIELD = "_model_config"


def per_learner_batch_unset(defaults: dict[str, Any]) -> bool:
    """Whether an algorithm's default config leaves ``train_batch_size_per_learner`` to be derived
    from ``train_batch_size`` (RLlib keeps the set value in a private field of the same name)."""
    return defaults.get("_train_batch_size_per_learner") is None


def connector_pieces(checkpoint: Path) -> list[Path]:
    """The folders of a checkpoint's env-to-module connector pieces, in pipeline order."""
    return sorted(p.parent for p in checkpoint.joinpath(*ENV_TO_MODULE_PIECES).glob(f"*/{PIECE_CLASS_FILE}"))
