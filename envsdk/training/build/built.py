"""What a build produces: the AlgorithmConfig and what the runner needs beside it, and the
algorithm class that ``run:`` names."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ray.rllib.algorithms.algorithm_config import AlgorithmConfig

from envsdk import internals
from envsdk.config import legacy
from envsdk.envs.checker import EnvInfo
from envsdk.envs.registry import ResolvedEnv
from envsdk.errors import UserError
from envsdk.substitutions import Stock

if TYPE_CHECKING:
    from ray.rllib.algorithms.algorithm import Algorithm


# Algorithms of envsdk's own, by the name ``run:`` gives them (RLlib has none of these).
OUR_ALGORITHMS = {"POCA": "envsdk.training.substitutes.poca.algorithm"}


def algorithm_class(run: str) -> type[Algorithm]:
    from ray.rllib.algorithms.registry import ALGORITHMS

    if run.upper() in OUR_ALGORITHMS:
        module = importlib.import_module(OUR_ALGORITHMS[run.upper()])
        ours: type[Algorithm] = getattr(module, run.upper())
        return ours

    removed = legacy.removed_algorithm(run)
    if removed is not None and run not in ALGORITHMS:
        nearest = (
            f"the nearest is {removed.algorithm}" if removed.algorithm else "none of its algorithms is close"
        )
        rerun = f": write 'run: {removed.algorithm}', or pass --translate-algo" if removed.safe else ""
        raise UserError(
            f"'run: {run}' was removed from RLlib ({removed.why})",
            f"RLlib 2.60 has {', '.join(ALGORITHMS)}; {nearest}{rerun}",
        )
    if run not in ALGORITHMS:
        match = {a.lower(): a for a in ALGORITHMS}.get(run.lower())
        raise UserError(
            f"unknown algorithm 'run: {run}'",
            f"did you mean '{match}'?" if match else f"RLlib 2.60 has: {', '.join(ALGORITHMS)}",
        )
    # Import only the chosen algorithm: Tune's registry would import every
    # algorithm (DreamerV3's import alone builds an env and warns).
    algo_class: type[Algorithm] = ALGORITHMS[run]()[0]  # type: ignore[no-untyped-call]
    return algo_class


@dataclass(kw_only=True)
class BuiltConfig:
    """An experiment's algorithm config plus what the runner needs beside it."""

    algo_class: type
    config: AlgorithmConfig
    env: ResolvedEnv
    env_info: EnvInfo
    search_space: dict[tuple[str, ...], Any] = field(default_factory=dict)  # key path -> Tune domain
    search_paths: list[Path] = field(default_factory=list)
    auto_runners: bool = False  # num_env_runners: auto, sized once Ray is up (see size_env_runners)
    models: list[str] = field(default_factory=list)  # "policy: what its network is", one per policy
    user_keys: set[str] = field(default_factory=set)  # config keys the YAML or --config set (2.60 names)
    sampler: str = "rllib"  # the env runners' sampling loop: "batched", or "rllib (why)"
    max_concurrent: int | None = None  # Tune trials at once, when they do not all fit (resources.fit)
    stock: Stock = field(default_factory=Stock)  # the switch: which substitutions are off (substitutions.py)
    # The experiment as built (config.experiment.record): checkpoints rebuild their config from it
    experiment: dict[str, Any] = field(default_factory=dict)

    def size_env_runners(self, cluster_cpus: float) -> int | None:
        """``num_env_runners: auto``: every CPU of the cluster but the algorithm's and the learners'."""
        if not self.auto_runners:
            return None
        c = self.config

        def number(value: Any) -> float:  # RLlib writes "auto" for some of these
            return float(value) if isinstance(value, int | float) and value else 1.0

        learners = (c.num_learners or 0) * number(c.num_cpus_per_learner)
        reserved = number(c.num_cpus_for_main_process) + learners
        per_runner = number(c.num_cpus_per_env_runner)
        count = max(0, int((cluster_cpus - reserved) // per_runner))
        c.env_runners(num_env_runners=count)
        return count

    def space_paths(self) -> dict[tuple[str, ...], Any]:
        """Where each search space sits in :meth:`param_space`, and its domain."""
        # The new stack keeps model_config in a private attribute.
        return {
            (internals.MODEL_CONFIG_FIELD, *path[1:]) if path[0] == "model_config" else path: domain
            for path, domain in self.search_space.items()
        }

    def param_space(self, chosen: dict[tuple[str, ...], Any] | None = None) -> dict[str, Any]:
        """The dict handed to Tune: the config with search spaces overlaid (or, at each path of
        ``chosen``, the value a trial drew)."""
        space = self.config.to_dict()
        for path, domain in {**self.space_paths(), **(chosen or {})}.items():
            *parents, leaf = path
            node = space
            for part in parents:
                node = node.setdefault(part, {})
            node[leaf] = domain
        return space

    def take_trial_values(self, chosen: dict[tuple[str, ...], Any]) -> None:
        """Set the values one trial drew from the search spaces (a checkpoint's manifest has them)."""
        space = self.param_space(chosen)
        self.config.update_from_dict({path[0]: space[path[0]] for path in chosen})
