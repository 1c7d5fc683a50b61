"""Where envsdk's modules of earlier versions live now, so that their checkpoints still load.

RLlib pickles a checkpoint's pieces with our classes named by module path (the config's callbacks,
env runner and connector classes, modules, learners), and so do Ray's processes between them.  When
a module of ours moves, those paths must still import: :data:`MOVED` maps each old path to today's,
and :func:`install` puts a finder on ``sys.meta_path`` that answers an old path with today's module.
It answers only envsdk's own names that no longer exist, so no other import changes; ``import
envsdk`` installs it, which every process that unpickles one of our objects has done first.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

# old module path -> today's (0.3.x: config's own keys in config/own_keys/; 0.4: training/ in
# rooms, the networks in a package of their own; 0.2: training/algorithm_config.py split into
# training/build/)
MOVED = {
    "envsdk.config.env_checks": "envsdk.config.own_keys.env_checks",
    "envsdk.config.environment_parameters": "envsdk.config.own_keys.environment_parameters",
    "envsdk.config.self_play": "envsdk.config.own_keys.self_play",
    "envsdk.envs.atari": "envsdk.envs.adapters.atari",
    "envsdk.envs.compat": "envsdk.envs.adapters.old_gym",
    "envsdk.envs.pettingzoo_envs": "envsdk.envs.adapters.pettingzoo",
    "envsdk.envs.default_models.catalogs": "envsdk.networks.catalogs",
    "envsdk.envs.default_models.choice": "envsdk.networks.choice",
    "envsdk.envs.default_models.encoder": "envsdk.networks.encoder",
    "envsdk.envs.default_models.masking": "envsdk.networks.masking",
    "envsdk.envs.default_models.spaces": "envsdk.envs.spaces",
    "envsdk.envs.guard": "envsdk.envs.faults.guard",
    "envsdk.envs.layout": "envsdk.envs.observation_layout",
    "envsdk.envs.plugins": "envsdk.networks.plugins",
    "envsdk.envs.stall_watch": "envsdk.envs.faults.stall_watch",
    "envsdk.internals.layout": "envsdk.internals.checkpoint_layout",
    "envsdk.training.build.reward_signals": "envsdk.training.build.modules.reward_signals",
    "envsdk.training.agent_metrics": "envsdk.training.hooks.agent_metrics",
    "envsdk.training.algorithm_config": "envsdk.training.build.multi_agent",
    "envsdk.training.batched_runner": "envsdk.training.substitutes.sampling.batched_runner",
    "envsdk.training.callbacks": "envsdk.training.hooks.callbacks",
    "envsdk.training.checkpoints": "envsdk.training.run.checkpoints",
    "envsdk.training.dqn_learner": "envsdk.training.substitutes.dqn.learner",
    "envsdk.training.env_setup": "envsdk.training.build.env_setup",
    "envsdk.training.episode_window": "envsdk.training.hooks.episode_window",
    "envsdk.training.failures": "envsdk.training.hooks.restarts",
    "envsdk.training.guards": "envsdk.training.hooks.faults",
    "envsdk.training.in_process": "envsdk.training.run.in_process",
    "envsdk.training.interrupt": "envsdk.training.hooks.interrupt",
    "envsdk.training.logger_callbacks": "envsdk.training.run.logger_callbacks",
    "envsdk.training.observation_filter": "envsdk.training.hooks.observation_filter",
    "envsdk.training.off_policy": "envsdk.training.substitutes.replay.training_step",
    "envsdk.training.outcome": "envsdk.training.report.outcome",
    "envsdk.training.plots": "envsdk.training.report.plots",
    "envsdk.training.policy_pass": "envsdk.training.substitutes.sampling.policy_pass",
    "envsdk.training.ppo_learner": "envsdk.training.substitutes.ppo.learner",
    "envsdk.training.resources": "envsdk.training.run.resources",
    "envsdk.training.reward_figure": "envsdk.training.report.reward_figure",
    "envsdk.training.reward_normalization": "envsdk.training.hooks.reward_normalization",
    "envsdk.training.sac_learner": "envsdk.training.substitutes.sac.learner",
    "envsdk.training.sac_module": "envsdk.training.substitutes.sac.module",
    "envsdk.training.self_play": "envsdk.training.hooks.self_play",
    "envsdk.training.transition_replay": "envsdk.training.substitutes.replay.buffers",
    "envsdk.training.tune_runner": "envsdk.training.run.tune_runner",
}


PACKAGES = {"envsdk.envs.default_models": "envsdk.networks"}  # every module under the old one moved


def today(name: str) -> str | None:
    """Where the module an old path names lives now; None for a path that has not moved."""
    if name in MOVED or name in PACKAGES:
        return MOVED.get(name) or PACKAGES[name]
    package = next((p for p in PACKAGES if name.startswith(p + ".")), None)
    return None if package is None else PACKAGES[package] + name[len(package) :]


class _Moved(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """An old module path of envsdk's answered with the module that holds its code now."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        new = today(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, self, is_package=fullname in PACKAGES, loader_state=new
        )

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(spec.loader_state)
        spec.loader_state = module.__spec__  # importlib gives the module the old name's spec next
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Today's module is already executed; it gets its own spec back, so that
        ``importlib.reload`` and tools that read ``__spec__`` see today's module."""
        module.__spec__ = module.__spec__.loader_state  # type: ignore[union-attr]


def install() -> None:
    """Put the finder on ``sys.meta_path`` once, first: under an old package path (``default_models``)
    Python's path finder would otherwise load today's files a second time under the old names."""
    if not any(isinstance(f, _Moved) for f in sys.meta_path):
        sys.meta_path.insert(0, _Moved())
