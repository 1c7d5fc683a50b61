"""envsdk's packages import only downwards: the layering ARCHITECTURE.md describes."""

from __future__ import annotations

import ast
import re

import pytest

from tests.helpers import ROOT

ORDER = ["", "config", "envs", "cluster", "training", "evaluation", "cli"]  # "" is envsdk/'s own modules
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
    assert packages == set(ORDER) - {""}


def test_every_module_path_architecture_names_exists():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b", text))
    bases = [ROOT, ROOT / "envsdk", ROOT / "unity_bridge"]
    missing = sorted(n for n in named if not any((base / n).is_file() for base in bases))
    assert not missing, f"ARCHITECTURE.md names modules that do not exist: {missing}"
    assert len(named) > 50
