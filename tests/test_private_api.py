"""Every use of a private Ray, RLlib, Tune, torch or CPython API goes through envsdk/internals/.

Read from the code's syntax: an attribute, a ``getattr``/``setattr``/``hasattr`` name, a keyword
argument or a module path that starts with ``_`` and is not one of our own names (a name some code
of ours defines or assigns) is someone else's private API.  tests/test_internals.py checks each
assumption that internals makes, and is the one test file that may use them directly.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import ROOT

SOURCES = [
    *(
        p
        for folder in ("envsdk", "unity_bridge", "models", "benchmarks", "tests")
        for p in (ROOT / folder).rglob("*.py")
    ),
    ROOT / "train.py",
    ROOT / "rollout.py",
]
INTERNALS = "envsdk/internals/"  # the package, split by what needs them
SKIPPED = {"tests/test_internals.py", "tests/test_private_api.py"}


def _skipped(path: Path) -> bool:
    name = str(path.relative_to(ROOT))
    return name in SKIPPED or name.startswith(INTERNALS)


# The config keys of earlier Ray versions that users' YAML files hold (``_enable_new_api_stack``):
# legacy.py translates them and test_legacy.py writes them, as words of a YAML file, not calls.
OLD_YAML_KEYS = {"envsdk/config/legacy.py", "tests/test_legacy.py"}
# Documented in CPython's own docs despite the underscore: os._exit (exit without clean-up),
# sys._getframe and sys._current_frames (what tracebacks and faulthandler use).
PUBLIC = {"_exit", "_getframe", "_current_frames", "_asdict", "_replace", "_fields", "_make"}
PRIVATE_PATH = re.compile(r"^[a-z][\w]*(\.\w+)*\._[a-z]\w*")
PRIVATE_KEY = re.compile(r"^_[a-z][a-z0-9]*(_[a-z0-9]+)+$")  # "_model_config": a config's private field
# RLlib's checkpoint layout (its folders and files): read through internals, which tests it.
CHECKPOINT_NAMES = {
    "class_and_ctor_args.pkl",
    "algorithm_state.pkl",
    "module_state.pkl",
    "policy_state.pkl",
    "rllib_checkpoint.json",
    "learner_group",
    "env_runner",
    "rl_module",
    "env_to_module_connector",
    "module_to_env_connector",
}


def _files() -> list[Path]:
    return [p for p in SOURCES if "protocol" not in p.parts and "seeds" not in p.parts and p.is_file()]


def _ours(trees: list[ast.AST]) -> set[str]:
    """Underscored names our own code defines: functions, classes, attributes, variables, parameters."""
    names: set[str] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.alias):
                names.add(node.asname or node.name)
    return {n for n in names if n.startswith("_")}


def _private(name: str, ours: set[str]) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in ours and name not in PUBLIC


def _uses(tree: ast.AST, ours: set[str], yaml_keys: bool = False) -> list[tuple[int, str]]:
    """Each private use in ``tree`` (``yaml_keys``: underscored strings are old YAML keys, not RLlib's)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr, ours):
            found.append((node.lineno, f".{node.attr}"))
        elif isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "hasattr", "delattr"):
                name = node.args[1] if len(node.args) > 1 else None
                if (
                    isinstance(name, ast.Constant)
                    and isinstance(name.value, str)
                    and _private(name.value, ours)
                ):
                    found.append((node.lineno, f"{func.id}(..., {name.value!r})"))
            found += [(node.lineno, f"{k.arg}=") for k in node.keywords if k.arg and _private(k.arg, ours)]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
            parts = [*node.module.split("."), *(a.name for a in node.names)]
            if any(_private(p, ours) for p in parts):
                found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Import):
            found += [(node.lineno, f"import {a.name}") for a in node.names if PRIVATE_PATH.match(a.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
            if (
                PRIVATE_PATH.match(text)
                or text in CHECKPOINT_NAMES
                or (not yaml_keys and PRIVATE_KEY.match(text) and _private(text, ours))
            ):
                found.append((node.lineno, repr(text)))
    return found


def test_private_apis_are_used_only_through_internals():
    files = _files()
    trees = {p: ast.parse(p.read_text(), str(p)) for p in files}
    # A test's own class may override a private method it names; a name that internals assigns
    # (an RLlib attribute it sets) is not ours: only the files the scan reads may make a name ours.
    ours = _ours([tree for p, tree in trees.items() if not _skipped(p)])
    uses = [
        f"{p.relative_to(ROOT)}:{line}: {what}"
        for p, tree in trees.items()
        if not _skipped(p)
        for line, what in _uses(tree, ours, str(p.relative_to(ROOT)) in OLD_YAML_KEYS)
    ]
    assert not uses, "private APIs outside envsdk/internals/:\n" + "\n".join(uses)


def test_the_scan_finds_each_kind_of_use():
    code = (
        "import torch._dynamo\n"
        "from ray.rllib.utils import _private_helper\n"
        "x = algo._counters\n"
        "y = getattr(algo, '_module_is_stateful', False)\n"
        "sample(workers, _uses_new_env_runners=True)\n"
        "PRELOAD = ('torch._dynamo',)\n"
        "z = self._ours\n"
        "w = config['_model_config']\n"
        "v = path / 'module_state.pkl'\n"
    )
    found = [what for _, what in _uses(ast.parse(code), {"_ours"})]
    assert sorted(found) == sorted(
        [
            "import torch._dynamo",
            "from ray.rllib.utils import ...",
            "._counters",
            "getattr(..., '_module_is_stateful')",
            "_uses_new_env_runners=",
            "'torch._dynamo'",
            "'_module_is_stateful'",  # as a string too
            "'_model_config'",
            "'module_state.pkl'",
        ]
    )


def test_a_name_that_internals_assigns_is_still_private_elsewhere(tmp_path):
    """internals sets RLlib's private attributes (``runner._needs_initial_reset = ...``): that
    does not make the name ours, so a use anywhere else is found."""
    trees = [ast.parse(p.read_text()) for p in (ROOT / INTERNALS).glob("*.py")]
    assigned = {
        n.attr
        for tree in trees
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
    }
    planted = sorted(a for a in assigned if a.startswith("_") and not a.startswith("__"))[0]
    ours = _ours([ast.parse(p.read_text()) for p in _files() if not _skipped(p)])
    found = _uses(ast.parse(f"x = runner.{planted}\n"), ours)
    assert found == [(1, f".{planted}")], (planted, found)
