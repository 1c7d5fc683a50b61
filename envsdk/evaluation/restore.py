"""Reading a checkpoint back: its algorithm, config and env, without building an Algorithm.

``Algorithm.from_checkpoint`` rebuilds the whole training set-up (every env
runner and learner, on the resources training had), which fails on a
smaller machine (ray #36761).  Evaluation needs far less: the config the env
runners were built from, the module weights and the connector state.  This
module loads exactly that, after :func:`envsdk.training.run.checkpoints.verify` has
checked the files, and re-resolves the env as ``train.py`` did (module path
next to the YAML the run came from).

The config is built again from the experiment the manifest records (checkpoint
format 2), with the code of the day: RLlib pickles the config whole, our hooks
included by module path, and a hook that has moved or changed its signature
since would break the checkpoint.  Format 1 records the YAML's path and the
experiment's name: where that YAML still holds the experiment, the config is built
from it too, and takes the values the trial ran with (its resolved config: the
trial's ``params.json``, else the checkpoint's own) where they are plain data, so that
command-line overrides such as a narrower network hold.  Where nothing can build it
again, the pickled config is used if each hook of ours in it still takes what RLlib
passes, and is refused in one line otherwise.
"""

from __future__ import annotations

import inspect
import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray

import envsdk
from envsdk.config.experiment import Experiment, from_record, load_experiments, plain
from envsdk.config.yamlio import merge
from envsdk.envs.imports import add_to_sys_path
from envsdk.envs.registry import EnvWrappers, ResolvedEnv, resolve_env
from envsdk.errors import UserError, as_user_error
from envsdk.internals import (
    ALGORITHM_STATE_FILE,
    CHECKPOINT_MARKER,
    ENV_RUNNER_DIR,
    MODULE_DIR,
    PIECE_CLASS_FILE,
)
from envsdk.notices import muted, notice
from envsdk.training.run.checkpoints import verify

POLICIES_DIR = "policies"

# What refuses, in this layer's words; the command line names the flag that asked for it.
ALGORITHM = "the algorithm"
EVALUATION_ENV = "the evaluation env"


@dataclass
class Restored:
    """What a checkpoint holds, ready to evaluate."""

    checkpoint: Path
    algorithm: str
    new_stack: bool
    config: Any  # AlgorithmConfig (new API stack) or the config dict (old API stack)
    env: ResolvedEnv
    env_config: dict[str, Any]
    multi_agent: bool
    search_paths: list[Path]
    worker_state: dict[str, Any] = field(default_factory=dict)  # old stack: filters, mapping fn

    @property
    def module_dir(self) -> Path:
        return self.checkpoint / MODULE_DIR


@dataclass(frozen=True)
class WrittenBy:
    """The versions that wrote a checkpoint."""

    ray: str
    envsdk: str  # "0.1.0" where the manifest does not say: that version did not record itself

    @classmethod
    def of(cls, checkpoint: Path, manifest: dict[str, Any]) -> WrittenBy:
        return cls(ray=_check_version(checkpoint), envsdk=str(manifest.get("envsdk_version", "0.1.0")))


OUR_PACKAGES = ("envsdk", "unity_bridge")


def _names_our_code(err: Exception) -> bool:
    """An unpickling error about a module or name of this tool (moved or renamed since)."""
    if isinstance(err, ModuleNotFoundError):
        return (err.name or "").split(".")[0] in OUR_PACKAGES
    return isinstance(err, AttributeError) and any(f"'{p}." in str(err) for p in OUR_PACKAGES)


def _unpickle(path: Path, by: WrittenBy) -> Any:
    try:
        with path.open("rb") as fh:
            return pickle.load(fh)  # old module paths: envsdk/moved.py
    except (ModuleNotFoundError, AttributeError) as err:
        if _names_our_code(err):
            raise UserError(
                f"{path.parent} was written by envsdk {by.envsdk}, whose checkpoints refer to its own code"
                f" by name; this envsdk ({envsdk.__version__}) no longer has it ({err})",
                f"roll it out or export it with envsdk {by.envsdk}; checkpoints of envsdk 0.3 and later"
                " build that code again when they load (CHANGELOG.md: checkpoint formats)",
            ) from err
        if isinstance(err, ModuleNotFoundError):
            raise UserError(
                f"the checkpoint needs the Python module '{err.name}', which cannot be imported here",
                "run from the folder the run was trained in, or add the module's folder to PYTHONPATH",
            ) from err
        raise _unreadable(path, by, err) from err
    except Exception as err:
        raise _unreadable(path, by, err) from err


def _unreadable(path: Path, by: WrittenBy, err: Exception) -> UserError:
    return UserError(
        f"cannot read {path.name} of {path.parent}: {type(err).__name__}: {err}",
        f"written by Ray {by.ray}, this is Ray {ray.__version__}: evaluate with Ray {by.ray}"
        if by.ray != ray.__version__
        else "the checkpoint is damaged: pick another one",
    )


def _check_version(checkpoint: Path) -> str:
    try:
        meta = json.loads((checkpoint / CHECKPOINT_MARKER).read_text())
    except ValueError as err:
        raise UserError(
            f"damaged checkpoint {checkpoint}: {CHECKPOINT_MARKER} is not JSON", "pick another checkpoint"
        ) from err
    written_by = str(meta.get("ray_version", "unknown"))
    if written_by.split(".")[0] != ray.__version__.split(".")[0]:
        raise UserError(
            f"{checkpoint} was written by Ray {written_by}; this is Ray {ray.__version__}, "
            "which cannot read it",
            f"retrain with this tool, or evaluate it with Ray {written_by}",
        )
    return written_by


def load(
    checkpoint: Path,
    run: str | None = None,
    env: str | None = None,
    env_config: dict[str, Any] | None = None,
    evaluation: bool = False,
) -> Restored:
    """Verify ``checkpoint`` and read its algorithm, config and env (``evaluation``: the run's
    ``evaluation_config`` env and its settings, merged over training's as RLlib merges them)."""
    manifest = verify(checkpoint) or {"run": {}}
    by = WrittenBy.of(checkpoint, manifest)
    info = manifest["run"]
    search = [Path(p) for p in info.get("search_paths", [])] or [Path.cwd()]
    add_to_sys_path(search)

    new_stack = (checkpoint / ENV_RUNNER_DIR).is_dir()
    stack = _new_stack(checkpoint, info, by, env_config) if new_stack else _old_stack(checkpoint, by)
    algorithm = stack.algo_class.__name__
    _check_algorithm(run, algorithm)
    env, base_config = _evaluation_env(stack, env) if evaluation else (env, stack.env_config)
    resolved = _resolved_env(info, env, stack, search)
    if not new_stack:  # after the env's module, which may register the model by its name
        _register_old_stack_model(stack.config, search[0])
    return Restored(
        checkpoint=checkpoint,
        algorithm=algorithm,
        new_stack=new_stack,
        config=stack.config,
        env=resolved,
        env_config={**base_config, **(env_config or {})},
        multi_agent=stack.multi_agent,
        search_paths=search,
        worker_state=stack.worker_state,
    )


def _check_algorithm(asked: str | None, algorithm: str) -> None:
    """An algorithm asked for must be the one the checkpoint was trained with (in any case)."""
    if asked and asked.upper() != algorithm.upper():
        raise UserError(
            f"{asked} does not match the checkpoint, which was trained with {algorithm}",
            f"name {algorithm}, or none: the checkpoint knows its algorithm",
            ALGORITHM,
        )


def _evaluation_env(stack: _Stack, env: str | None) -> tuple[Any, dict[str, Any]]:
    """The env and env_config of the run's ``evaluation_config`` (an ``env`` asked for wins), its
    env_config merged over training's as RLlib merges them."""
    config = stack.config
    settings = dict(
        (config.get("evaluation_config") if isinstance(config, dict) else config.evaluation_config) or {}
    )
    if not settings.get("env") and not settings.get("env_config"):
        raise UserError(
            "the checkpoint's run has no evaluation_config env or env_config",
            "play training's env instead (the default)",
            EVALUATION_ENV,
        )
    return env or settings.get("env"), merge(stack.env_config, dict(settings.get("env_config") or {}))


def _resolved_env(info: dict[str, Any], env: Any, stack: _Stack, search: list[Path]) -> ResolvedEnv:
    """The env asked for, else training's: as the manifest records it, with the wrappers its config
    keys asked for (an env asked for gets none), else as the config names it."""
    wrapped = info.get("env_wrapped") if env is None else None
    env_ref = env or (wrapped or {}).get("env") or info.get("env") or stack.env_ref
    resolved = resolve_env(env_ref if isinstance(env_ref, str) else None, search)
    if wrapped:
        resolved = resolved.wrapped(EnvWrappers.from_dict(wrapped))
    return resolved


@dataclass
class _Stack:
    """What one API stack's checkpoint says of its run."""

    algo_class: type
    config: Any
    env_ref: Any
    env_config: dict[str, Any]
    multi_agent: bool
    worker_state: dict[str, Any] = field(default_factory=dict)


def _new_stack(
    checkpoint: Path, info: dict[str, Any], by: WrittenBy, env_config: dict[str, Any] | None
) -> _Stack:
    """The config built again with today's code from the experiment the manifest records (format 2)
    or the YAML it names (format 1), so that no hook of ours is unpickled; where neither builds:
    unpickled, its hooks checked.  ``env_config``: the command line's entries, which the rebuild
    takes too (a game's file_name where the checkpoint moved to another machine)."""
    if info.get("experiment_spec"):
        chosen = {tuple(path): value for path, value in info.get("searched", [])}
        built = _rebuilt(from_record(info["experiment_spec"]), env_config)
        if built is not None and chosen:
            built.take_trial_values(chosen)
    else:
        exp = _recorded_experiment(info)
        built = _rebuilt(exp, env_config) if exp is not None else None
        if built is not None:
            _take_trial_values(built.config, _resolved_config(checkpoint, by), env_config)
    if built is not None:
        config, algo_class = built.config, built.algo_class
    else:
        algo_class, config = _pickled_config(checkpoint, by)
        _check_hooks(checkpoint, info, by, config)
    return _Stack(algo_class, config, config.env, dict(config.env_config or {}), config.is_multi_agent)


def _pickled_config(checkpoint: Path, by: WrittenBy) -> tuple[type, Any]:
    """The algorithm class and the config the checkpoint's env runner was built with, unpickled."""
    algo_class = _unpickle(checkpoint / PIECE_CLASS_FILE, by)["class"]
    ctor = _unpickle(checkpoint / ENV_RUNNER_DIR / PIECE_CLASS_FILE, by)
    return algo_class, ctor["ctor_args_and_kwargs"][1]["config"]


# a checkpoint's env_config is the run's, which may name files of another machine
MOVED_ENV_HINT = (
    "the checkpoint's env_config is the training run's; rollout.py --env-config '{file_name: PATH}' "
    "names a Unity player here (any env_config entry can be given so)"
)


def _rebuilt(exp: Experiment, env_config: dict[str, Any] | None) -> Any:
    """The run's BuiltConfig from its experiment, or None where today's code refuses it (said in a
    notice)."""
    from envsdk.training.build import build_config  # RLlib's algorithms: only here

    try:
        with muted():
            return build_config(exp, {"env_config": env_config} if env_config else None)
    except UserError as err:
        notice(
            f"the run's config does not build with envsdk {envsdk.__version__} ({err.message}): "
            "using the config the checkpoint holds"
        )
        return None
    except Exception as err:  # the env's own package says its settings are wrong here (a player moved)
        said = as_user_error(err)
        if said is None:
            raise
        raise UserError(said.message, (f"{said.hint}; " if said.hint else "") + MOVED_ENV_HINT) from err


def _recorded_experiment(info: dict[str, Any]) -> Experiment | None:
    """Format 1's record of its run: the experiment of that name in the YAML the manifest names,
    where the file is still there and the experiment still has the algorithm and env trained."""
    source = Path(str(info.get("config_file") or ""))
    if not info.get("config_file") or not source.is_file():
        return None
    try:
        with muted():
            found = [e for e in load_experiments(source) if e.name == info.get("experiment")]
    except UserError as err:
        notice(f"{source} no longer reads ({err.message}): using the config the checkpoint holds")
        return None
    if not found or (found[0].run, found[0].env) != (info.get("algorithm"), info.get("env")):
        notice(
            f"{source} no longer holds experiment '{info.get('experiment')}' with"
            f" {info.get('algorithm')} on {info.get('env')}: using the config the checkpoint holds"
        )
        return None
    notice(f"checkpoint format 1: its config is built again from {source} with this envsdk")
    return found[0]


TRIAL_PARAMS = "params.json"  # the trial's resolved config, which Tune and in_process.py write beside


def _resolved_config(checkpoint: Path, by: WrittenBy) -> dict[str, Any]:
    """The config the trial ran with, as RLlib's ``to_dict``: its trial's ``params.json`` (plain
    JSON), else the checkpoint's pickled config."""
    params = checkpoint.parent / TRIAL_PARAMS
    if params.is_file():
        try:
            recorded: dict[str, Any] = json.loads(params.read_text())
            return recorded
        except ValueError:
            pass  # a trial folder's damaged log: the checkpoint's own copy follows
    return dict(_pickled_config(checkpoint, by)[1].to_dict())


def _is_data(value: Any) -> bool:
    """A value made of JSON's kinds only (no hook, class or space), which any version reads alike."""
    if isinstance(value, dict):
        return all(_is_data(v) for v in value.values())
    if isinstance(value, list | tuple):
        return all(_is_data(v) for v in value)
    return (
        value is None
        or isinstance(value, bool | int | float)
        or (
            isinstance(value, str) and not value.startswith("<")  # params.json's repr of an object
        )
    )


def _take_trial_values(config: Any, recorded: dict[str, Any], env_config: dict[str, Any] | None) -> None:
    """Set on the rebuilt ``config`` each plain value the trial ran with that differs from it (the
    command line's overrides of the day, the values a search drew); ``env_config``: the rollout's
    own entries, kept over the trial's."""
    now = config.to_dict()
    taken = {
        key: value
        for key, value in recorded.items()
        if key in now and _is_data(value) and _is_data(now[key]) and plain(value) != plain(now[key])
    }
    if "env_config" in taken and env_config:
        taken["env_config"] = merge(taken["env_config"], env_config)
    config.update_from_dict(taken)


def _check_hooks(checkpoint: Path, info: dict[str, Any], by: WrittenBy, config: Any) -> None:
    """A pickled config's callbacks of ours must take what RLlib 2.60 passes them (the arguments it
    always gives, the ones with no default in ``RLlibCallback``'s method of that event); one that
    changed its signature since would fail when the env runner calls it."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    misfits = []
    for name in sorted(vars(config)):
        event = getattr(RLlibCallback, name.removeprefix("callbacks_"), None)
        hooks = getattr(config, name)
        if not name.startswith("callbacks_on_") or event is None or not hooks:
            continue
        given = {
            p.name: None
            for p in inspect.signature(event).parameters.values()
            if p.kind is p.KEYWORD_ONLY and p.default is p.empty
        }
        for hook in hooks if isinstance(hooks, list | tuple) else [hooks]:
            module = getattr(getattr(hook, "func", hook), "__module__", "") or ""
            if module.split(".")[0] not in OUR_PACKAGES:
                continue
            try:
                inspect.signature(hook).bind_partial(**given)
            except TypeError:
                misfits.append(getattr(getattr(hook, "func", hook), "__qualname__", repr(hook)))
    if misfits:
        source = info.get("config_file") or "its YAML"
        raise UserError(
            f"{checkpoint} was written by envsdk {by.envsdk} (checkpoint format 1), whose config calls"
            f" envsdk's {', '.join(misfits)} as this envsdk ({envsdk.__version__}) no longer can, and"
            f" the YAML that would build it again ({source}) is not there",
            f"put the run's YAML back at {source} to build it again with this envsdk, or roll it out"
            f" with envsdk {by.envsdk} (pip install envsdk=={by.envsdk})",
        )


def _old_stack(checkpoint: Path, by: WrittenBy) -> _Stack:
    state = _unpickle(checkpoint / ALGORITHM_STATE_FILE, by)
    config = state["config"]
    if not isinstance(config, dict):
        config = config.to_dict()
    worker_state = state.get("worker", {})
    return _Stack(
        algo_class=state["algorithm_class"],
        config=config,
        env_ref=config.get("env"),
        env_config=dict(config.get("env_config") or {}),
        multi_agent=worker_state.get("policy_ids", ["default_policy"]) != ["default_policy"],
        worker_state=worker_state,
    )


def _register_old_stack_model(config: dict[str, Any], yaml_dir: Path) -> None:
    """ModelV2 plugins are referenced by name: register them again in this process."""
    name = (config.get("model") or {}).get("custom_model")
    if not isinstance(name, str):
        return
    from ray.rllib.models import ModelCatalog

    from envsdk.networks.plugins import load_model, plugin_name, search_path

    plugin = load_model(plugin_name(name), search_path(yaml_dir))
    ModelCatalog.register_custom_model(name, plugin.cls)
