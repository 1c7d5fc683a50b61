"""envsdk's packages import only downwards: the layering ARCHITECTURE.md describes."""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers import ROOT

ORDER = ["", "config", "envs", "cluster", "training", "evaluation", "cli"]  # "" is envsdk/'s own modules
BASE_PACKAGES = {"internals"}  # packages of the bottom layer, beside envsdk/'s own modules
PACKAGE = ROOT / "envsdk"


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in ORDER else ""


def imported(path) -> set[str]:
    """Every envsdk module a file imports, at top level or inside a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("envsdk")}
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "envsdk":
            out |= {f"{node.module}.{a.name}" for a in node.names}  # a name or a submodule: layer() tells
    return out


MODULES = sorted(
    p for p in PACKAGE.rglob("*.py") if p.parent != PACKAGE or p.stem not in ("__init__", "__main__")
)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_go_down_the_layers(path):
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    upward = sorted(t for t in imported(path) if ORDER.index(layer(t)) > ORDER.index(layer(module)))
    assert not upward, f"{module} ({layer(module) or 'envsdk'}) imports from a layer above it: {upward}"


def test_every_package_has_a_layer():
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert packages == (set(ORDER) - {""}) | BASE_PACKAGES


def test_every_module_path_architecture_names_exists():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b", text))
    bases = [ROOT, ROOT / "envsdk", ROOT / "unity_bridge"]
    missing = sorted(n for n in named if not any((base / n).is_file() for base in bases))
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"
    assert len(named) > 50


# ---- the packages beside envsdk, and cycles ------------------------------------------------------

OTHERS = [
    p
    for folder in ("unity_bridge", "models")
    for p in (ROOT / folder).rglob("*.py")
    if "protocol" not in p.parts
]


def _module(path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports_of(path) -> set[str]:
    """The modules of envsdk, unity_bridge and models a file imports, at top level or in a function."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
    return {m for m in out if m.split(".")[0] in ("envsdk", "unity_bridge", "models")}


@pytest.mark.parametrize("path", OTHERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_unity_bridge_imports_nothing_from_envsdk_and_nothing_imports_models(path):
    imported = _imports_of(path)
    if path.is_relative_to(ROOT / "unity_bridge"):
        assert not [m for m in imported if m.startswith("envsdk")], f"{path}: the bridge is a lower layer"


def test_nothing_of_ours_imports_the_model_plugins():
    for path in [*MODULES, PACKAGE / "__init__.py", *OTHERS]:
        if not path.is_relative_to(ROOT / "models"):
            assert not [m for m in _imports_of(path) if m.startswith("models")], path


def test_no_import_cycle():
    files = [*PACKAGE.rglob("*.py"), *OTHERS]
    known = {_module(p): p for p in files}
    graph = {
        name: {m for m in _imports_of(path) for m in (m, m.rsplit(".", 1)[0]) if m in known and m != name}
        for name, path in known.items()
    }
    # A package's __init__ that only re-exports is not a cycle of its own: skip edges into packages.
    graph = {n: {m for m in deps if known[m].name != "__init__.py"} for n, deps in graph.items()}
    done: set[str] = set()
    path: list[str] = []

    def visit(node: str) -> None:
        if node in path:
            cycle = [*path[path.index(node) :], node]
            raise AssertionError("import cycle: " + " -> ".join(cycle))
        if node in done:
            return
        path.append(node)
        for dep in sorted(graph[node]):
            visit(dep)
        path.pop()
        done.add(node)

    for node in sorted(graph):
        visit(node)


def test_no_module_is_ignored_by_git():
    """A package that a .gitignore pattern hides (``build/`` once hid envsdk/training/build/) is
    missing from every clone: CI's, and users'."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    folders = ["envsdk", "unity_bridge", "models", "tests", "benchmarks", "configs"]
    hidden = subprocess.run(
        ["git", "ls-files", "--others", "--ignored", "--exclude-standard", "--", *folders],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert not [p for p in hidden if p.endswith((".py", ".yaml", ".json", ".pkl"))], hidden[:10]
