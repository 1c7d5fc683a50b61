"""Model plugins: ``custom_model: customnet`` loads ``models/customnet.py``.

Search path, first match wins: a ``models/`` folder next to the YAML file,
the folders in ``$ENVSDK_MODEL_PATH`` (``:``-separated), then this project's
``models/``.  ``custom_model`` may also name

* ``file.ClassName``: one class of a file that holds several;
* a name registered with ``ModelCatalog.register_custom_model`` by a module the experiment
  imports (the env's module, as Ray 1.x's docs wire a ModelV2);
* a class by its import path (``ray.rllib.examples.rl_modules.classes.vpg_torch_rlm.VPGTorchRLModule``).

A file's model class is its one torch model class, or among several, the one named
``CustomModel`` (the Ray 1.x tutorials), else the one subclass of the others (RLlib's files
define a base class and its torch subclass); more than one is refused, listing the
``file.ClassName`` choices.  The class is

* a torch ``ModelV2`` -> RLlib's old API stack is selected for the
  experiment and ``custom_model_config`` entries become keyword arguments of
  the constructor;
* an ``RLModule`` (new API stack, the default) -> ``custom_model_config``
  becomes the module's ``model_config``; when the class declares
  ``default_model_config`` (a dict) unknown keys are errors;
* a TensorFlow model (a ``TFModelV2``, or a file importing tensorflow or
  keras) -> an error that says to port it: RLlib 2.60 has only torch.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.rllib.core.rl_module.rl_module import RLModule
from ray.rllib.models.tf.tf_modelv2 import TFModelV2
from ray.rllib.models.torch.torch_modelv2 import TorchModelV2

from envsdk import internals
from envsdk.envs.imports import pickle_by_value
from envsdk.errors import UserError, did_you_mean

MODEL_PATH_ENV = "ENVSDK_MODEL_PATH"
PROJECT_MODELS = Path(__file__).resolve().parents[2] / "models"
TF_MODULES = {"tensorflow", "keras", "tf_keras"}  # a model file importing one of these is a TF model
_MODELV2_ARGS = ("self", "obs_space", "action_space", "num_outputs", "model_config", "name")


def search_path(yaml_dir: Path | None = None) -> list[Path]:
    paths = [yaml_dir / "models"] if yaml_dir else []
    paths += [Path(p) for p in os.environ.get(MODEL_PATH_ENV, "").split(os.pathsep) if p]
    paths.append(PROJECT_MODELS)
    seen: list[Path] = []
    for p in paths:
        if p.resolve() not in seen:
            seen.append(p.resolve())
    return seen


def available(paths: list[Path]) -> list[str]:
    names = {f.stem for p in paths if p.is_dir() for f in p.glob("*.py") if not f.stem.startswith("_")}
    return sorted(names)


@dataclass
class ModelPlugin:
    name: str
    cls: type
    path: Path

    @property
    def is_modelv2(self) -> bool:
        return issubclass(self.cls, TorchModelV2)

    @property
    def catalog_name(self) -> str:
        """The name a ModelV2 is registered under in RLlib's ModelCatalog: without dots, which
        RLlib would take for an import path whose class it builds with keyword arguments that
        RLlib's own model classes do not all take (``obs_space=``).  :func:`plugin_name` reverses it."""
        return self.name.replace(".", "/")

    def check_options(self, options: dict[str, Any]) -> None:
        """Raise a UserError for options the model does not accept."""
        if self.is_modelv2:
            params = inspect.signature(self.cls).parameters
            if any(p.kind is p.VAR_KEYWORD for p in params.values()):
                return
            valid = [n for n in params if n not in _MODELV2_ARGS]
        else:
            defaults = getattr(self.cls, "default_model_config", None)
            if not isinstance(defaults, dict):
                return
            valid = list(defaults)
        for key in options:
            if key not in valid:
                raise UserError(
                    f"model '{self.name}' ({self.path}) has no option '{key}'",
                    did_you_mean(key, valid) or f"its options: {', '.join(valid) or 'none'}",
                )


def plugin_name(catalog_name: str) -> str:
    """The ``custom_model`` a user wrote, from the name its ModelV2 was registered under."""
    return catalog_name.replace("/", ".")


def _classes_of(module: Any, module_name: str) -> list[type]:
    return [o for o in vars(module).values() if inspect.isclass(o) and o.__module__ == module_name]


def _tf_model(name: str, found: Path, why: str) -> UserError:
    return UserError(
        f"custom_model '{name}' ({found}) is a TF model ({why}): RLlib 2.60 has only torch",
        "port it to torch: a TorchModelV2 or TorchRLModule subclass (models/customnet.py is an example)",
    )


def load_model(name: str, paths: list[Path]) -> ModelPlugin:
    """The model class ``custom_model: name`` means (see the module's docstring for the forms)."""
    found = _model_file(name, paths)
    if found is not None:
        return _from_file(name, found, None)
    registered = internals.registered_model(name)
    if registered is not None:
        return ModelPlugin(name, registered, Path(inspect.getfile(registered)))
    stem, _, class_name = name.rpartition(".")
    if stem:
        found = _model_file(stem, paths)
        if found is not None:
            return _from_file(stem, found, class_name)
        imported = _imported_class(stem, class_name)
        if imported is not None:
            return ModelPlugin(name, imported, Path(inspect.getfile(imported)))
    names = available(paths)
    raise UserError(
        f"custom_model '{name}': no {name}.py in {', '.join(str(p) for p in paths)}, no model registered"
        " with ModelCatalog.register_custom_model under that name, and no class at that import path",
        did_you_mean(name, names) or f"available models: {', '.join(names) or 'none'}",
    )


def _model_file(name: str, paths: list[Path]) -> Path | None:
    if not name.isidentifier():
        return None
    return next((p / f"{name}.py" for p in paths if (p / f"{name}.py").is_file()), None)


def _imported_class(module: str, class_name: str) -> type | None:
    """``module.class_name`` if the module imports and holds a torch model class of that name."""
    try:
        target = getattr(importlib.import_module(module), class_name, None)
    except ImportError:
        return None
    except Exception as err:
        raise UserError(
            f"custom_model: module {module} failed to import: {type(err).__name__}: {err}",
            "fix the error in the module (run with --debug for the traceback)",
        ) from err
    if not inspect.isclass(target):
        return None
    if not issubclass(target, TorchModelV2 | RLModule):
        raise UserError(
            f"custom_model '{module}.{class_name}' is not a model class (a {target.__mro__[1].__name__})",
            "name a TorchModelV2 (old API) or RLModule (new API) subclass",
        )
    return target


def _import_file(name: str, found: Path) -> tuple[Any, str]:
    module_name = f"envsdk_models_{name}"
    spec = importlib.util.spec_from_file_location(module_name, found)
    assert spec is not None and spec.loader is not None, found  # a .py file always has both
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        if isinstance(err, ModuleNotFoundError) and (err.name or "").split(".")[0] in TF_MODULES:
            raise _tf_model(name, found, f"it imports {err.name}") from err
        raise UserError(
            f"model file {found} failed to import: {type(err).__name__}: {err}",
            "fix the error in the model file (run with --debug for the traceback)",
        ) from err
    pickle_by_value(module)
    return module, module_name


def _from_file(name: str, found: Path, class_name: str | None) -> ModelPlugin:
    """Import ``found`` and pick its model class (``class_name``, or the one :func:`_pick` finds)."""
    module, module_name = _import_file(name, found)
    defined = _classes_of(module, module_name)
    classes = [c for c in defined if issubclass(c, TorchModelV2 | RLModule) and not inspect.isabstract(c)]
    if class_name is not None:
        return ModelPlugin(name, _named_class(name, found, classes, class_name), found)
    return ModelPlugin(name, _sole_class(name, found, defined, classes), found)


def _named_class(name: str, found: Path, classes: list[type], class_name: str) -> type:
    """The model class ``class_name`` of the file ``found`` (``custom_model: name.class_name``)."""
    chosen = [c for c in classes if c.__name__ == class_name]
    if not chosen:
        raise UserError(
            f"custom_model '{name}.{class_name}': {found} has no model class {class_name}",
            did_you_mean(class_name, [c.__name__ for c in classes])
            or f"its model classes: {', '.join(c.__name__ for c in classes) or 'none'}",
        )
    return chosen[0]


def _sole_class(name: str, found: Path, defined: list[type], classes: list[type]) -> type:
    """The one model class the file ``found`` means by its name alone (``custom_model: name``);
    ``defined``: every class it defines, ``classes``: those that are torch model classes."""
    tf_models = [c for c in defined if issubclass(c, TFModelV2)]
    if tf_models and not classes:
        raise _tf_model(name, found, f"{tf_models[0].__name__} is a TFModelV2")
    if not classes:
        raise UserError(
            f"{found} defines no model class (found: {', '.join(c.__name__ for c in defined) or 'none'})",
            "subclass ray.rllib TorchModelV2 (old API) or TorchRLModule (new API)",
        )
    picked = _pick(classes)
    if len(picked) > 1:
        raise UserError(
            f"{found} defines several model classes: {', '.join(c.__name__ for c in picked)}",
            f"name one: custom_model: {' or '.join(f'{name}.{c.__name__}' for c in picked)}",
        )
    return picked[0]


def _pick(classes: list[type]) -> list[type]:
    """The classes a file's name alone may mean: ``CustomModel`` if there is one, else those that no
    other class subclasses (RLlib's base class and its torch subclass: the subclass)."""
    named = [c for c in classes if c.__name__ == "CustomModel"]
    if named:
        return named
    return [c for c in classes if not any(o is not c and issubclass(o, c) for o in classes)]
