"""Every use of a private Ray, RLlib, Tune, torch or CPython API goes through envsdk/internals.py.

Read from the code's syntax: an attribute, a ``getattr``/``setattr``/``hasattr`` name, a keyword
argument or a module path that starts with ``_`` and is not one of our own names (a name some code
of ours defines or assigns) is someone else's private API.  tests/test_internals.py checks each
assumption that internals.py makes, and is the one test file that may use them directly.
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
SKIPPED = {"envsdk/internals.py", "tests/test_internals.py", "tests/test_private_api.py"}
# Documented in CPython's own docs despite the underscore: os._exit (exit without clean-up),
# sys._getframe and sys._current_frames (what tracebacks and faulthandler use).
PUBLIC = {"_exit", "_getframe", "_current_frames", "_asdict", "_replace", "_fields", "_make"}
PRIVATE_PATH = re.compile(r"^[a-z][\w]*(\.\w+)*\._[a-z]\w*")


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


def _uses(tree: ast.AST, ours: set[str]) -> list[tuple[int, str]]:
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
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and PRIVATE_PATH.match(node.value)
        ):
            found.append((node.lineno, repr(node.value)))
    return found


def test_private_apis_are_used_only_through_internals():
    files = _files()
    trees = {p: ast.parse(p.read_text(), str(p)) for p in files}
    ours = _ours(list(trees.values()))  # a test's own class may override a private method it names
    uses = [
        f"{p.relative_to(ROOT)}:{line}: {what}"
        for p, tree in trees.items()
        if str(p.relative_to(ROOT)) not in SKIPPED
        for line, what in _uses(tree, ours)
    ]
    assert not uses, "private APIs outside envsdk/internals.py:\n" + "\n".join(uses)


def test_the_scan_finds_each_kind_of_use():
    code = (
        "import torch._dynamo\n"
        "from ray.rllib.utils import _private_helper\n"
        "x = algo._counters\n"
        "y = getattr(algo, '_module_is_stateful', False)\n"
        "sample(workers, _uses_new_env_runners=True)\n"
        "PRELOAD = ('torch._dynamo',)\n"
        "z = self._ours\n"
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
        ]
    )
