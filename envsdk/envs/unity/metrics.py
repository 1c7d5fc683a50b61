"""Game stats (the stats side channel) and player health as RLlib metrics.

Installed by train.py for Unity envs as ``callbacks_on_sample_end``; values
appear in the results under ``env_runners/unity/<key>``.  A game stat is the
mean of what the game sent during the iteration (not a slow moving
average), so that its curve shows learning as it happens.
"""

from __future__ import annotations

from typing import Any

from envsdk.envs.curriculum import sub_environments


def log_unity_metrics(*, env_runner: Any, metrics_logger: Any, **_: Any) -> None:
    for env in sub_environments(env_runner):
        game_env = getattr(env, "multi", env)  # UnityGymEnv wraps a UnityEnv
        if not hasattr(game_env, "game"):
            continue
        for key, value in game_env.game.stats.drain().items():
            metrics_logger.log_value(("unity", key), value, reduce="mean")
        stats = game_env.game.player_stats()
        if stats is not None:
            metrics_logger.log_value(("unity", "player_threads"), stats.threads)
            metrics_logger.log_value(("unity", "player_rss_mb"), stats.rss_mb)
        metrics_logger.log_value(("unity", "player_restarts"), game_env.restart_count, reduce="max")
