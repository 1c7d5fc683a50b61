"""Importing user code (env modules, curriculum functions) by dotted path.

``custom_env.CustomEnv`` or ``custom_env:make_env`` is looked up relative to
the YAML file's folder and the working directory.  Modules loaded this way are
registered with cloudpickle *by value*, so Ray workers on other nodes can
unpickle user classes without the file being on their ``sys.path``.  What such a
module imports at its top is not re-run by unpickling, so :func:`imported_with` names
the installed packages it brought in (``import minigrid`` registers ids), for the env
factory to import in each process.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from envsdk.envs.adapters.old_gym import alias_gym
from envsdk.errors import UserError, did_you_mean
from envsdk.notices import notice


def pickle_by_value(module: Any) -> None:
    """Ship ``module``'s classes to Ray workers by value (Ray's own cloudpickle)."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)


def add_to_sys_path(folders: Iterable[Path]) -> None:
    for folder in folders:
        entry = str(Path(folder).resolve())
        if entry not in sys.path:
            sys.path.insert(0, entry)


def split_ref(ref: str) -> tuple[str, str] | None:
    """``pkg.mod:attr`` or ``pkg.mod.Attr`` -> (module, attribute); None if no dot/colon."""
    if ":" in ref:
        module, _, attr = ref.partition(":")
        return (module, attr) if module and attr else None
    if "." in ref:
        module, _, attr = ref.rpartition(".")
        return module, attr
    return None


_IMPORTED_WITH: dict[str, tuple[str, ...]] = {}


def imported_with(module_name: str) -> tuple[str, ...]:
    """The installed top-level packages that importing the user module ``module_name`` loaded
    (new in ``sys.modules`` then) or that its globals come from; empty for an installed module."""
    module = sys.modules.get(module_name)
    if module is None or not is_user_module(module):
        return ()
    roots = set(_IMPORTED_WITH.get(module_name, ()))
    for value in vars(module).values():
        source = value.__name__ if isinstance(value, type(sys)) else getattr(value, "__module__", None)
        if isinstance(source, str) and source:
            roots.add(source.split(".")[0])
    installed = [
        r for r in roots if r in sys.modules and not is_user_module(sys.modules[r]) and r != "builtins"
    ]
    return tuple(sorted(r for r in installed if not r.startswith("_") and r not in sys.stdlib_module_names))


def is_user_module(module: Any) -> bool:
    """True for modules outside site-packages and the standard library."""
    path = getattr(module, "__file__", None) or ""
    return bool(path) and "site-packages" not in path and not path.startswith(sys.prefix)


def import_user_module(name: str) -> Any:
    """Import a user's module; old tutorials' ``import gym`` gets gymnasium if gym is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        missing = err.name or ""
        if not (missing == "gym" or missing.startswith("gym.")) or not alias_gym():
            raise
        who = "gym" if name.split(".")[0] == "gym" else f"'{name}' imports gym, which"
        notice(f"{who} is not installed: using gymnasium, its successor, as gym")
        return importlib.import_module(name)


def import_ref(ref: str, search: Iterable[Path] = (), what: str = "object") -> Any:
    """Import ``module.attr`` / ``module:attr``; failures are UserErrors."""
    parts = split_ref(ref)
    if parts is None:
        raise UserError(f"'{ref}' is not an import path", f"write the {what} as module.Name")
    module_name, attr = parts
    module = import_module(module_name, search, what, ref)
    try:
        return getattr(module, attr)
    except AttributeError:
        names = [n for n in dir(module) if not n.startswith("_")]
        raise UserError(
            f"module '{module_name}' has no {what} '{attr}'",
            did_you_mean(attr, names) or f"it defines: {', '.join(names[:12])}",
        ) from None


def import_module(module_name: str, search: Iterable[Path] = (), what: str = "module", ref: str = "") -> Any:
    """Import ``module_name`` next to the YAML file or in the working directory; failures are
    UserErrors naming ``ref`` (what the YAML wrote).  A user's module is shipped by value and the
    packages it brings in are recorded (:func:`imported_with`)."""
    ref = ref or module_name
    folders = [Path(p) for p in search] + [Path.cwd()]
    add_to_sys_path(folders)
    before = {name.split(".")[0] for name in sys.modules}
    try:
        module = import_user_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.split(".")[0] != err.name.split(".")[0]:
            raise UserError(
                f"importing {what} '{ref}' failed: module '{err.name}' is not installed",
                f"pip install the package that provides '{err.name}'",
            ) from err
        looked = ", ".join(str(f) for f in folders)
        raise UserError(
            f"cannot import {what} '{ref}': no module '{module_name}' (looked in {looked})",
            f"put {module_name.replace('.', '/')}.py next to the YAML file or in the working dir",
        ) from err
    except SyntaxError as err:
        raise UserError(
            f"{err.filename}:{err.lineno}: syntax error in {what} module: {err.msg}",
            "fix the Python syntax error",
        ) from err
    if is_user_module(module):
        pickle_by_value(module)
        loaded = {name.split(".")[0] for name in sys.modules} - before
        _IMPORTED_WITH[module_name] = tuple(sorted(set(_IMPORTED_WITH.get(module_name, ())) | loaded))
    return module
