"""The config keys whose value RLlib calls: how it calls them, each import path checked against
that call before anything starts, and a ``custom_eval_function``'s metrics reported.

A YAML can name a function or class only by its import path (``custom_eval_function:
my_eval.evaluate``).  :data:`CALLABLES` lists every such key of RLlib 2.60's ``AlgorithmConfig``
(and ours: ``curriculum``, Ray 1.x's ``env_task_fn``) with the arguments RLlib passes;
:func:`resolve_callables` imports each path and says, in one line naming the YAML's, when it
names nothing, nothing callable, or a callable that cannot take those arguments.

RLlib 2.60's new API stack calls a ``custom_eval_function`` as ``fn(algorithm, eval_workers)``,
checks that it returned ``(metrics, env_steps, agent_steps)``, then drops ``metrics``: an
iteration's evaluation results are read back from the algorithm's ``MetricsLogger`` only.
:class:`Reported` logs what the function returned there, under ``evaluation/``, so that
``progress.csv``, TensorBoard and a ``stop`` key see it; a Ray 1.x function that returns the
metrics alone is taken too (no steps counted).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from numbers import Number
from pathlib import Path
from typing import Any

from ray.rllib.utils.metrics import EVALUATION_RESULTS
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from envsdk.config.yamlio import LineDict
from envsdk.envs.imports import import_ref
from envsdk.errors import UserError


@dataclass(frozen=True)
class Called:
    """How RLlib calls a key's value.

    ``args``: the positional arguments it passes (None: not checked, RLlib's call varies);
    ``keywords``: for callbacks, the keyword arguments it passes (each required parameter must be one
    of them); ``many``: a list of them is allowed; ``names``: a list of names is the key's other
    form (``policies_to_train: [red]``); ``keep_path``: the value stays the import path (imported
    again in each env runner); ``example``: what to write.
    """

    kind: str  # "function" or "class"
    example: str
    args: int | None = None
    keywords: tuple[str, ...] = ()
    many: bool = False
    names: bool = False
    keep_path: bool = False


CALLABLES: dict[str, Called] = {
    "callbacks": Called("class", "class MyCallbacks(RLlibCallback) (no constructor arguments)", 0, many=True),
    "custom_eval_function": Called(
        "function", "def evaluate(algorithm, eval_workers) -> (metrics_dict, env_steps, agent_steps)", 2
    ),
    "policy_mapping_fn": Called("function", "def policy_mapping_fn(agent_id, episode, **kwargs)", 2),
    "policies_to_train": Called(
        "function", "def policies_to_train(policy_id, batch=None) -> bool", 2, names=True
    ),
    "curriculum": Called(
        "function", "def curriculum(train_results, task_settable_env, env_ctx) -> task", 3, keep_path=True
    ),
    "observation_fn": Called(
        "function",
        "def observation_fn(agent_obs, worker, base_env, policies, episode, **kwargs)",
        keywords=("agent_obs", "worker", "base_env", "policies", "episode"),
    ),
    "offline_loss_for_module_fn": Called(
        "function",
        "def loss(self, *, module_id, config, batch, fwd_out) (a Learner's compute_loss_for_module)",
    ),
    "offline_data_class": Called("class", "class MyOfflineData(OfflineData)"),
    "prelearner_class": Called("class", "class MyPreLearner(OfflinePreLearner)"),
    "prelearner_buffer_class": Called("class", "a replay buffer class"),
    "offline_eval_runner_class": Called("class", "class MyRunner(OfflineEvaluationRunner)"),
}
CALLBACK_PREFIX = "callbacks_on_"  # callbacks_on_<event>: RLlibCallback.on_<event>'s keywords


def called(key: str) -> Called | None:
    """How RLlib calls ``key``'s value, or None for a key that takes no callable."""
    if key.startswith(CALLBACK_PREFIX):
        from ray.rllib.callbacks.callbacks import RLlibCallback

        method = getattr(RLlibCallback, "on_" + key.removeprefix(CALLBACK_PREFIX), None)
        if method is None:
            return None
        params = inspect.signature(method).parameters.values()
        keywords = tuple(p.name for p in params if p.kind is p.KEYWORD_ONLY)
        return Called("function", f"def {key.removeprefix('callbacks_')}({', '.join(keywords)}, **kwargs)",
                      keywords=keywords, many=True)  # fmt: skip
    return CALLABLES.get(key)


def check(key: str, value: Any, ref: str, where: str) -> None:
    """``value`` (what the import path ``ref`` named) can be called as RLlib calls ``key``'s, else a
    UserError at ``where`` (the YAML's line) that says what to write."""
    how = called(key)
    if how is None:
        return
    named = f"{where}: {key} '{ref}'"
    if how.kind == "class" and not inspect.isclass(value):
        raise UserError(f"{named} is {_what(value)}, not a class", f"name a class: {how.example}")
    if key == "callbacks":
        from ray.rllib.callbacks.callbacks import RLlibCallback

        if not issubclass(value, RLlibCallback):
            raise UserError(
                f"{named} is no RLlibCallback (or Ray 1.x DefaultCallbacks)", f"write {how.example}"
            )
    if not callable(value):
        raise UserError(f"{named} is {_what(value)}, not a function", f"name a function: {how.example}")
    try:
        signature = inspect.signature(value)
    except (TypeError, ValueError):  # a builtin without one: RLlib's call is the check
        return
    problem = _arguments_problem(signature, how)
    if problem:
        raise UserError(f"{named} {problem}", f"write {how.example}")


def _arguments_problem(signature: inspect.Signature, how: Called) -> str | None:
    """Why a callable of ``signature`` cannot take RLlib's call (None if it can)."""
    if how.keywords:
        params = signature.parameters.values()
        required = [
            p for p in params if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]
        unknown = [p.name for p in required if p.name not in how.keywords or p.kind is p.POSITIONAL_ONLY]
        if unknown:
            return (
                f"requires {', '.join(repr(n) for n in unknown)}, but RLlib passes only the keywords"
                f" {', '.join(how.keywords)}"
            )
        return None
    if how.args is None:
        return None
    try:
        signature.bind(*range(how.args))
    except TypeError as err:
        return f"cannot take the {how.args} argument{'s' if how.args != 1 else ''} RLlib passes ({err})"
    return None


def _what(value: Any) -> str:
    return (
        f"a module ({value.__name__})"
        if inspect.ismodule(value)
        else f"a {type(value).__name__} ({value!r:.40})"
    )


def resolve_callables(values: LineDict, paths: list[Path]) -> None:
    """Every key RLlib calls (:data:`CALLABLES`: ``custom_eval_function``,
    ``policy_mapping_fn``, ``callbacks``, ``callbacks_on_<event>``, ...) given as an import path
    (or a list of them), imported and checked against RLlib's call; a wrong path or a function
    that cannot take the call is a UserError naming the YAML's line."""
    for key, value in list(values.items()):
        how = called(key)
        if how is None or value is None or (how.names and isinstance(value, list | tuple | set)):
            continue
        refs = value if isinstance(value, list) and how.many else [value]
        found = [_imported(key, ref, values.where(key), paths) for ref in refs]
        if not how.keep_path:
            values[key] = found if isinstance(value, list) else found[0]


def _imported(key: str, ref: Any, where: str, paths: list[Path]) -> Any:
    """What the import path ``ref`` names (``ref`` itself where it is no path), checked for ``key``."""
    if not isinstance(ref, str):
        found, ref = ref, repr(ref)
    else:
        try:
            found = import_ref(ref, paths, what=key)
        except UserError as err:
            raise UserError(f"{where}: {err.message}", err.hint) from err
    check(key, found, ref, where)
    return found


class Reported:
    """``fn`` as RLlib calls it, its returned metrics logged into the evaluation results (picklable)."""

    def __init__(self, fn: Any):
        self.fn = fn

    def __call__(self, algorithm: Any, eval_workers: Any) -> tuple[Any, int, int]:
        returned = self.fn(algorithm, eval_workers)
        metrics, env_steps, agent_steps = (returned, 0, 0) if isinstance(returned, dict) else returned
        numbers = _numbers(metrics) if isinstance(metrics, dict) else {}
        if numbers:
            logged = MetricsLogger()
            logged.log_dict(numbers, reduce="mean", window=1)
            algorithm.metrics.aggregate([logged.reduce()], key=EVALUATION_RESULTS)
        return metrics, env_steps, agent_steps

    def __repr__(self) -> str:
        return f"{self.fn.__module__}.{getattr(self.fn, '__qualname__', self.fn)}"


def _numbers(metrics: dict[str, Any]) -> dict[str, Any]:
    """The numeric leaves of ``metrics`` (nested mappings kept), which a MetricsLogger averages."""
    out: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, dict):
            nested = _numbers(value)
            if nested:
                out[str(key)] = nested
        elif isinstance(value, Number) and not isinstance(value, bool):
            out[str(key)] = float(value)  # type: ignore[arg-type]  # a Number that is real
    return out
