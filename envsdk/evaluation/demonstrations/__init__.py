"""Demonstrations from play: a rollout's episodes as ML-Agents ``.demo`` files (``recording``), and
the scripted players that play instead of a checkpoint to record a heuristic (``scripted``)."""
