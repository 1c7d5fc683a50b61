"""envsdk's packages import only downwards: the layering ARCHITECTURE.md describes."""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers import ROOT

ORDER = ["", "config", "envs", "networks", "cluster", "training", "evaluation", "cli"]  # "": envsdk/'s own
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


# training/'s rooms, in the same rule: each imports only from the rooms before it.
ROOMS = ["hooks", "substitutes", "build", "report", "run"]
LARGEST_ROOM = 2500  # lines of one package (its modules, not its subpackages'), ISSUE 57's bound


def room(module: str) -> int:
    parts = module.split(".")
    return ROOMS.index(parts[2]) if parts[:2] == ["envsdk", "training"] and len(parts) > 3 else -1


TRAINING = [p for p in MODULES if p.is_relative_to(PACKAGE / "training")]


@pytest.mark.parametrize("path", TRAINING, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_training_rooms_import_only_from_the_rooms_before_them(path):
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    assert room(module) >= 0 or path.name == "__init__.py", f"{module} is in no room of {ROOMS}"
    later = sorted(t for t in imported(path) if room(t) > room(module) >= 0)
    assert not later, f"{module} ({ROOMS[room(module)]}) imports from a later room: {later}"


PACKAGES = sorted(p.parent for p in PACKAGE.rglob("__init__.py"))


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_says_its_one_job_and_is_no_larger_than_a_room(package):
    assert ast.get_docstring(ast.parse((package / "__init__.py").read_text())), f"{package}: no docstring"
    lines = sum(len(p.read_text().splitlines()) for p in package.glob("*.py"))
    assert lines <= LARGEST_ROOM, f"{package} holds {lines} lines: split it by concern"


def test_the_room_rules_catch_a_planted_import():
    """The two rules above fail where they should: a hook importing the run loop, envs the networks."""
    assert room("envsdk.training.run.in_process") > room("envsdk.training.hooks.faults")
    assert ORDER.index(layer("envsdk.networks.choice")) > ORDER.index(layer("envsdk.envs.checker"))
    assert room("envsdk.training.callbacks") == -1  # a module outside the rooms is named by the rule


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


BRIDGE = [p for p in OTHERS if p.is_relative_to(ROOT / "unity_bridge")]


@pytest.mark.parametrize("path", BRIDGE, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_unity_bridge_imports_nothing_from_envsdk(path):
    assert not [m for m in _imports_of(path) if m.startswith("envsdk")], (
        f"{path}: the bridge is a lower layer"
    )


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


# ---- the tests, laid out as the code is ------------------------------------------------------------

TESTS = ROOT / "tests"
# Folders of tests beside the packages' own: envsdk/'s own modules and internals (base), the product
# as a whole against code we did not write (project), and what tests read (data: envs, corpus, ...).
TEST_FOLDERS_OF_THEIR_OWN = {"base", "project", "unity_bridge"}


def test_each_test_file_sits_in_the_folder_of_the_package_it_tests():
    """tests/training/substitutes/test_sac.py tests envsdk/training/substitutes/: a reader finds a
    module's tests by its package's path."""
    misplaced = []
    for path in TESTS.rglob("test_*.py"):
        folder = path.parent.relative_to(TESTS)
        if folder.parts[0] == "data":
            continue
        if (
            folder.parts[0] not in TEST_FOLDERS_OF_THEIR_OWN
            and not (PACKAGE / folder / "__init__.py").is_file()
        ):
            misplaced.append(str(path.relative_to(ROOT)))
    assert not misplaced, f"test files in no package's folder (tests/<package path>/): {misplaced}"
    assert not list(TESTS.glob("test_*.py")), "a test file at tests/'s top: put it in its package's folder"
