"""Model plugins: ``custom_model: customnet`` loads ``models/customnet.py``.

Search path, first match wins: a ``models/`` folder next to the YAML file,
the folders in ``$ENVSDK_MODEL_PATH`` (``:``-separated), then this project's
``models/``.  A plugin file holds one model class (or several, one of them
named ``CustomModel`` as in the Ray 1.x tutorials):

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


def _classes_of(module: Any, module_name: str) -> list[type]:
    return [o for o in vars(module).values() if inspect.isclass(o) and o.__module__ == module_name]


def _tf_model(name: str, found: Path, why: str) -> UserError:
    return UserError(
        f"custom_model '{name}' ({found}) is a TF model ({why}): RLlib 2.60 has only torch",
        "port it to torch: a TorchModelV2 or TorchRLModule subclass (models/customnet.py is an example)",
    )


def load_model(name: str, paths: list[Path]) -> ModelPlugin:
    """Import ``<name>.py`` from the search path and pick its model class."""
    found = next((p / f"{name}.py" for p in paths if (p / f"{name}.py").is_file()), None)
    names = available(paths)
    if found is None:
        raise UserError(
            f"custom_model '{name}': no {name}.py in {', '.join(str(p) for p in paths)}",
            did_you_mean(name, names) or f"available models: {', '.join(names) or 'none'}",
        )
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
    classes = [
        c
        for c in _classes_of(module, module_name)
        if issubclass(c, TorchModelV2 | RLModule) and not inspect.isabstract(c)
    ]
    tf_models = [c for c in _classes_of(module, module_name) if issubclass(c, TFModelV2)]
    if tf_models and not classes:
        raise _tf_model(name, found, f"{tf_models[0].__name__} is a TFModelV2")
    if len(classes) > 1:
        classes = [c for c in classes if c.__name__ == "CustomModel"] or classes
    if not classes:
        others = [c.__name__ for c in _classes_of(module, module_name)]
        raise UserError(
            f"{found} defines no model class (found: {', '.join(others) or 'no classes'})",
            "subclass ray.rllib TorchModelV2 (old API) or TorchRLModule (new API)",
        )
    if len(classes) > 1:
        raise UserError(
            f"{found} defines several model classes: {', '.join(c.__name__ for c in classes)}",
            "keep one model per file, or name the one to use CustomModel",
        )
    return ModelPlugin(name, classes[0], found)
