"""Evaluate a checkpoint: ``python rollout.py CHECKPOINT --episodes 1`` (see --help)."""

from envsdk.cli.rollout import entry

if __name__ == "__main__":
    entry()
