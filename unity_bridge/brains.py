"""Exported brains as a Unity build runs them: the names of the brain files' index and mask input,
and :class:`BrainPlayer`, which plays them with onnxruntime (the stand-in player's ``--brain``).
The export itself, from a checkpoint, is envsdk's (``envsdk.evaluation.unity_brain``).

A brain with memory (ML-Agents' ``recurrent_in`` input, ``[batch, 1, memory_size]``) gets each agent's
memory back at its next decision, from the ``recurrent_out`` of its last one, as Unity's inference
does: zeros at an agent's episode start (Unity gives the agent a new id then), and forgotten when its
episode ends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from unity_bridge.errors import SettingsError

MASKS = "action_masks"  # the input Unity feeds the discrete actions' masks through
INDEX = "brains.json"  # behavior -> brain file, written beside the brains
MEMORY_IN, MEMORY_OUT = "recurrent_in", "recurrent_out"  # an agent's memory, in ML-Agents' names


class BrainPlayer:
    """Runs exported brains with onnxruntime: behavior -> actions, as a Unity build does."""

    def __init__(self, source: Path, deterministic: bool = True):
        if not source.exists():
            raise SettingsError(
                f"{source}: no such file or folder",
                "pass the folder the brains were exported into, or one brain's .onnx file",
            )
        folder = source if source.is_dir() else source.parent
        index = json.loads((folder / INDEX).read_text()) if (folder / INDEX).is_file() else None
        if index is None and source.is_dir():
            raise SettingsError(
                f"{source}: no {INDEX}, the index written beside exported brains",
                "pass the folder the brains were exported into, or one brain's .onnx file",
            )
        self.deterministic = deterministic
        self.files = {b: folder / e["file"] for b, e in index["behaviors"].items()} if index else {}
        self.default = source if source.is_file() else None
        self._sessions: dict[Path, Any] = {}
        self._memories: dict[tuple[str, int], np.ndarray] = {}  # (behavior, agent id) -> its memory

    def act(
        self, behavior: str, observations: list[np.ndarray], mask: np.ndarray | None, agents: list[int]
    ) -> tuple[np.ndarray, np.ndarray]:
        """A batch of agents' observations (one array per observation) -> (continuous, discrete).

        ``agents``: the agents' ids, in the batch's order, whose memories a brain with memory carries.
        """
        import onnxruntime

        path = self.files.get(behavior, self.default)
        if path is None:
            raise SettingsError(
                f"no brain for behavior '{behavior}' in {INDEX}",
                f"{INDEX} has brains for {', '.join(self.files) or 'no behavior'}; export a run on this game",
            )
        if path not in self._sessions:
            self._sessions[path] = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        session = self._sessions[path]
        feeds = {f"obs_{i}": np.asarray(o, np.float32) for i, o in enumerate(observations)}
        inputs = {i.name: i for i in session.get_inputs()}
        if mask is not None and MASKS in inputs:
            feeds[MASKS] = mask.astype(np.float32)
        keys = [(behavior, agent) for agent in agents]
        if MEMORY_IN in inputs:
            size = int(inputs[MEMORY_IN].shape[-1])
            blank = np.zeros((1, size), np.float32)
            feeds[MEMORY_IN] = np.stack([self._memories.get(key, blank) for key in keys])
        names = [o.name for o in session.get_outputs()]
        out = dict(zip(names, session.run(None, feeds), strict=True))
        if MEMORY_OUT in out:
            self._memories.update(zip(keys, out[MEMORY_OUT], strict=True))
        prefix = "deterministic_" if self.deterministic else ""
        batch = len(observations[0])
        continuous = out.get(f"{prefix}continuous_actions", np.zeros((batch, 0), np.float32))
        discrete = out.get(f"{prefix}discrete_actions", np.zeros((batch, 0), np.int64))
        return continuous, discrete

    def forget(self, behavior: str, agent: int) -> None:
        """An agent's episode ended: its memory goes (the next episode's agent starts from zeros)."""
        self._memories.pop((behavior, agent), None)
