"""Every use of a private Ray, RLlib, Tune, torch or CPython API goes through envsdk/internals/.

Read from the code's syntax: an attribute, a ``getattr``/``setattr``/``hasattr`` name, a keyword
argument or a module path that starts with ``_`` and is not one of our own names (a name some code
of ours defines or assigns) is someone else's private API.  tests/base/test_internals.py checks each
assumption that internals makes, and is the one test file that may use them directly.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

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
SKIPPED = {"tests/base/test_internals.py", "tests/base/test_private_api.py"}


def _skipped(path: Path) -> bool:
    name = str(path.relative_to(ROOT))
    return name in SKIPPED or name.startswith(INTERNALS)


# The config keys of earlier Ray versions that users' YAML files hold (``_enable_new_api_stack``):
# legacy.py translates them and test_legacy.py writes them, as words of a YAML file, not calls.
# translate.py pops ``_fake_gpus``, the Ray 1.x key that legacy.py passes on as it is.
OLD_YAML_KEYS = {
    "envsdk/config/legacy.py",
    "tests/config/test_legacy.py",
    "envsdk/training/build/translate.py",
}
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


# ---- what RLlib, Ray, Tune, torch and gymnasium call private: their own definitions ------------------

UPSTREAM_PACKAGES = ("ray", "torch", "gymnasium")
# ``def _x(``, ``self._x = ...``/``cls._x: T = ...``/``self._x(...)``, or an indented ``_x = ...`` (a class
# attribute; a function's local variable too, which only adds names).
UPSTREAM_DEFINITION = re.compile(
    rb"(?:\bdef[ \t]+|\b(?:self|cls)\.)(_[A-Za-z]\w*)(?=[ \t]*\(|[ \t]*(?::[^=\n]*)?=(?!=))"
    rb"|^[ \t]+(_[A-Za-z]\w*)(?=[ \t]*(?::[^=\n]*)?=(?!=))",
    re.MULTILINE,
)


@functools.cache
def upstream_private_names() -> frozenset[str]:
    """Underscored names that Ray (RLlib, Tune), torch or gymnasium define on their own objects, read
    from their installed sources with a regex: about a second for their ~5000 files."""
    names: set[str] = set()
    for package in UPSTREAM_PACKAGES:
        spec = importlib.util.find_spec(package)
        assert spec is not None and spec.submodule_search_locations, package
        for folder in spec.submodule_search_locations:
            for path in Path(folder).rglob("*.py"):
                for defined, indented in UPSTREAM_DEFINITION.findall(path.read_bytes()):
                    names.add((defined or indented).decode())
    return frozenset(n for n in names if not n.startswith("__"))


# Private-looking hooks that another library documents as the way to extend it, which only the
# benchmarks override (their packages are the bench extra's, installed or not: the scan must say
# the same either way).
DOCUMENTED_HOOKS = {
    "_on_step": "stable_baselines3.common.callbacks:BaseCallback, a callback's documented hook "
    "(benchmarks/solve_suite.py, benchmarks/fixed_budget.py)",
}


def overridden_names() -> set[str]:
    """The private RLlib methods our classes override deliberately (internals.OVERRIDDEN), and the
    other libraries' documented hooks (DOCUMENTED_HOOKS)."""
    from envsdk.internals import OVERRIDDEN

    return {key.rsplit(".", 1)[-1] for key in OVERRIDDEN} | set(DOCUMENTED_HOOKS)


# ---- what our own code defines ----------------------------------------------------------------------

OUR_PACKAGES = {"envsdk", "unity_bridge", "models", "benchmarks", "tests", "train", "rollout"}
PLAIN_BASES = {"object", "Protocol", "Generic", "NamedTuple", "TypedDict"}  # typing's: no private state


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes under ``node``, not descending into nested classes (theirs are theirs)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if not isinstance(child, ast.ClassDef):
            yield from _own_nodes(child)


def _base_name(base: ast.expr) -> str:
    """A base as written (``gym.Env``, ``TorchRLModule``; ``Generic[T]`` as ``Generic``)."""
    return ast.unparse(base.value if isinstance(base, ast.Subscript) else base)


def _aliases(tree: ast.Module) -> dict[str, str]:
    """What each imported name of a file stands for, as a dotted path (``gym`` -> ``gymnasium``)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


@functools.cache
def _theirs(path: str) -> frozenset[str] | None:
    """The underscored names an upstream class (``path``: module.Class) and its bases define for
    themselves, read from their source; None where the class cannot be imported."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            value: Any = importlib.import_module(".".join(parts[:cut]))
            for part in parts[cut:]:
                value = getattr(value, part)
            break
        except (ImportError, AttributeError):
            continue
    else:
        return None
    if not isinstance(value, type):
        return None
    names: set[str] = set()
    for klass in value.__mro__:
        try:
            source = inspect.getsource(klass).encode()
        except (OSError, TypeError):  # builtins: no private names of Python code
            continue
        names |= {(d or i).decode() for d, i in UPSTREAM_DEFINITION.findall(source)}
        names |= {n for n in vars(klass) if n.startswith("_")}
    return frozenset(n for n in names if not n.startswith("__"))


@dataclass
class Class:
    """One class of ours: the underscored names it defines for itself, and its bases."""

    name: str
    defines: set[str]
    bases: list[str]
    aliases: dict[str, str]  # its file's imported names (see _aliases)
    node: ast.ClassDef


def _class(node: ast.ClassDef, aliases: dict[str, str]) -> Class:
    defines = set()
    for stmt in node.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defines.add(stmt.name)
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            defines |= {t.id for t in targets if isinstance(t, ast.Name)}
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            for sub in _own_nodes(stmt):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.ctx, ast.Store)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id in ("self", "cls")
                ):
                    defines.add(sub.attr)
    private = {n for n in defines if n.startswith("_") and not n.startswith("__")}
    return Class(node.name, private, [_base_name(b) for b in node.bases], aliases, node)


@dataclass
class Ours:
    """What the scanned code defines: its classes, module-level names, parameters and module names."""

    classes: dict[int, Class] = field(default_factory=dict)  # by id() of the ClassDef
    by_name: dict[str, list[Class]] = field(default_factory=dict)
    module_names: set[str] = field(default_factory=set)
    params: set[str] = field(default_factory=set)
    aliases: dict[int, dict[str, str]] = field(default_factory=dict)  # each file's, by id() of its tree

    def add(self, tree: ast.Module, stem: str = "") -> None:
        aliases = self.aliases[id(tree)] = _aliases(tree)
        self.module_names.add(stem)
        for stmt in tree.body:
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self.module_names.add(stmt.name)
            for target in _own_nodes(stmt) if isinstance(stmt, ast.Assign | ast.AnnAssign) else ():
                if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                    self.module_names.add(target.id)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                cls = _class(node, aliases)
                self.classes[id(node)] = cls
                self.by_name.setdefault(cls.name, []).append(cls)
            elif isinstance(node, ast.arg):
                self.params.add(node.arg)

    def base(self, aliases: dict[str, str], name: str) -> Class | str:
        """The class of ours that a name in a file (``aliases``: its imports) stands for (defined in
        that file, or imported from our packages), or the dotted path of someone else's."""
        same = [c for c in self.by_name.get(name, []) if c.aliases is aliases]
        if same:
            return same[0]
        head, _, rest = name.partition(".")
        path = ".".join(filter(None, [aliases.get(head, head), rest]))
        tail = path.rsplit(".", 1)[-1]
        if path.split(".")[0] in OUR_PACKAGES and self.by_name.get(tail):
            return self.by_name[tail][0]
        return path

    def lineage(self, cls: Class) -> tuple[set[str], list[str]]:
        """The names a class and its bases of ours define, and its other bases (dotted paths)."""
        defines: set[str] = set()
        foreign, todo, seen = [], [cls], set()
        while todo:
            current = todo.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            defines |= current.defines
            for name in current.bases:
                base = self.base(current.aliases, name)
                if isinstance(base, str):
                    foreign.append(base)
                else:
                    todo.append(base)
        return defines, foreign

    def attributes(self) -> set[str]:
        return {n for c in self.classes.values() for n in c.defines} | self.module_names


# ---- the scan ----------------------------------------------------------------------------------------


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC


Function = ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda


def _walk(
    node: ast.AST, cls: ast.ClassDef | None = None, function: Function | None = None
) -> Iterator[tuple[ast.AST, ast.ClassDef | None, Function | None]]:
    """Each node, with the innermost class whose body it is in and the innermost function."""
    for child in ast.iter_child_nodes(node):
        yield child, cls, function
        inner = child if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) else function
        yield from _walk(child, child if isinstance(child, ast.ClassDef) else cls, inner)


@dataclass
class Where:
    """Where an access is: the class of ours it is in, its function, and the names of our modules."""

    ours: Ours
    aliases: dict[str, str]
    cls: Class | None
    function: Function | None
    modules: set[str]

    def owner(self, value: ast.expr) -> Class | None:
        """The class of ours that ``value`` is an instance (or the class) of, where the code says:
        ``self``/``cls``/``super()`` in a method, a local annotated with one or built from one
        (``x: Ours = ...``, ``x = Ours(...)``, ``x = cls(...)``), or ``self.x`` assigned so."""
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super":
            return self.cls
        if isinstance(value, ast.Name) and value.id in ("self", "cls"):
            return self.cls
        if isinstance(value, ast.Name) and self.function is not None:
            return self._typed(self.function, lambda t: isinstance(t, ast.Name) and t.id == value.id)
        if (
            isinstance(value, ast.Attribute)
            and isinstance(value.value, ast.Name)
            and value.value.id == "self"
        ):
            for method in self._methods():
                typed = self._typed(
                    method,
                    lambda t: (
                        isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                        and t.attr == value.attr
                    ),
                )
                if typed is not None:
                    return typed
        return None

    def _methods(self) -> list[Function]:
        body = self.cls.node.body if self.cls is not None else []
        return [m for m in body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]

    def _typed(self, function: Function, target: Any) -> Class | None:
        for node in _own_nodes(function):
            if isinstance(node, ast.AnnAssign) and target(node.target):
                return self._class_of(node.annotation)
            if (
                isinstance(node, ast.Assign)
                and any(target(t) for t in node.targets)
                and isinstance(node.value, ast.Call)
            ):
                func = node.value.func
                if isinstance(func, ast.Name) and func.id == "cls":
                    return self.cls
                return self._class_of(func)
        return None

    def _class_of(self, expr: ast.expr) -> Class | None:
        name = expr.value if isinstance(expr, ast.Constant) and isinstance(expr.value, str) else None
        found = self.ours.base(self.aliases, name or _base_name(expr))
        return None if isinstance(found, str) else found


class Scan:
    def __init__(self, ours: Ours) -> None:
        self.ours, self.upstream, self.overridden = ours, upstream_private_names(), overridden_names()
        self.attributes = ours.attributes()

    def on_self(self, name: str, cls: Class) -> bool:
        """Whether ``self.name``/``cls.name``/``super().name`` inside ``cls`` is ours: a name the class
        (or a base of ours) defines, which no upstream base may define unless it is a deliberate
        override (internals.OVERRIDDEN)."""
        defines, foreign = self.ours.lineage(cls)
        if name not in defines:
            return False
        return name in self.overridden or not any(name in self.theirs(base) for base in foreign)

    def theirs(self, base: str) -> frozenset[str]:
        """What a base of someone else's defines; every upstream name where it cannot be imported."""
        if base in PLAIN_BASES:
            return frozenset()
        names = _theirs(base)
        if names is None:  # not importable here: every upstream name, if it is an upstream package's
            return self.upstream if base.split(".")[0] in UPSTREAM_PACKAGES else frozenset()
        return names

    def on_other(self, name: str) -> bool:
        """Whether ``obj.name`` on anything else is ours: a name of ours that no upstream code defines."""
        return name in self.attributes and name not in self.upstream

    def attribute(self, value: ast.expr, name: str, where: Where) -> bool:
        """Whether ``value.name`` is a private use of someone else's."""
        if not _private(name):
            return False
        if isinstance(value, ast.Name) and value.id in where.modules:  # a module of ours
            return name not in self.ours.module_names
        owner = where.owner(value)
        return not (self.on_self(name, owner) if owner is not None else self.on_other(name))

    def call(self, node: ast.Call, where: Where) -> list[tuple[int, str]]:
        """A ``getattr``-like call's private name, and a call's private keywords."""
        found = []
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("getattr", "setattr", "hasattr", "delattr"):
            name = node.args[1] if len(node.args) > 1 else None
            if (
                isinstance(name, ast.Constant)
                and isinstance(name.value, str)
                and self.attribute(node.args[0], name.value, where)
            ):
                found.append((node.lineno, f"{func.id}(..., {name.value!r})"))
        found += [
            (node.lineno, f"{k.arg}=")
            for k in node.keywords
            if k.arg and _private(k.arg) and k.arg not in self.ours.params
        ]
        return found

    def uses(self, tree: ast.Module, yaml_keys: bool = False) -> list[tuple[int, str]]:
        """Each private use in ``tree`` (``yaml_keys``: its underscored strings are old YAML keys)."""
        found = []
        aliases = self.ours.aliases.get(id(tree)) or _aliases(tree)
        modules = {n for n, path in aliases.items() if path.split(".")[0] in OUR_PACKAGES}
        modules -= set(self.ours.by_name)
        for node, cls, function in _walk(tree):
            where = Where(self.ours, aliases, cls and self.ours.classes[id(cls)], function, modules)
            if isinstance(node, ast.Attribute) and self.attribute(node.value, node.attr, where):
                found.append((node.lineno, f".{node.attr}"))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and cls and node in cls.body:
                if _private(node.name) and not self.on_self(node.name, self.ours.classes[id(cls)]):
                    found.append((node.lineno, f"def {node.name}"))  # an override of theirs
            elif isinstance(node, ast.Call):
                found += self.call(node, where)
            elif isinstance(node, ast.ImportFrom) and node.module and node.module != "__future__":
                parts = [*node.module.split("."), *(a.name for a in node.names)]
                if node.level == 0 and parts[0] not in OUR_PACKAGES:
                    private = any(_private(p) for p in parts)
                else:
                    private = any(_private(p) and p not in self.ours.module_names for p in parts)
                if private:
                    found.append((node.lineno, f"from {node.module} import ..."))
            elif isinstance(node, ast.Import):
                found += [(node.lineno, f"import {a.name}") for a in node.names if PRIVATE_PATH.match(a.name)]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if (
                    PRIVATE_PATH.match(text)
                    or text in CHECKPOINT_NAMES
                    or (not yaml_keys and PRIVATE_KEY.match(text) and not self.on_other(text))
                ):
                    found.append((node.lineno, repr(text)))
        return found


@functools.cache
def _our_trees() -> dict[Path, ast.Module]:
    return {p: ast.parse(p.read_text(), str(p)) for p in _files()}


def _ours(*extra: tuple[ast.Module, str]) -> Ours:
    """What the scanned files define (not internals': a name that internals assigns on RLlib's
    objects is not ours), and what ``extra`` trees define."""
    ours = Ours()
    for path, tree in _our_trees().items():
        if not _skipped(path):
            ours.add(tree, path.stem)
    for tree, stem in extra:
        ours.add(tree, stem)
    return ours


def scan(source: str, where: str = "envsdk/training/planted.py") -> list[tuple[int, str]]:
    """The private uses the scan finds in ``source``, as if it were the file ``where`` of ours."""
    tree = ast.parse(source)
    return Scan(_ours((tree, Path(where).stem))).uses(tree, where in OLD_YAML_KEYS)


def test_private_apis_are_used_only_through_internals():
    scanner = Scan(_ours())
    uses = [
        f"{p.relative_to(ROOT)}:{line}: {what}"
        for p, tree in _our_trees().items()
        if not _skipped(p)
        for line, what in scanner.uses(tree, str(p.relative_to(ROOT)) in OLD_YAML_KEYS)
    ]
    assert not uses, "private APIs outside envsdk/internals/:\n" + "\n".join(uses)


def test_the_upstream_names_are_read_from_the_installed_packages():
    names = upstream_private_names()
    # RLlib's runner loop, a learner's optimizers, torch's parameter dicts, gymnasium's TimeLimit
    assert {"_sample", "_optimizers", "_parameters", "_max_episode_steps", "_learner"} <= names
    assert {"__init__", "sample", "_no_such_name_anywhere"}.isdisjoint(names)


def test_the_scan_finds_each_kind_of_use():
    code = (
        "import torch._dynamo\n"
        "from ray.rllib.utils import _private_helper\n"
        "x = algo._counters\n"
        "y = getattr(algo, '_module_is_stateful', False)\n"
        "sample(workers, _uses_new_env_runners=True)\n"
        "PRELOAD = ('torch._dynamo',)\n"
        "w = config['_model_config']\n"
        "v = path / 'module_state.pkl'\n"
    )
    found = [what for _, what in scan(code)]
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


# Written in envsdk/training/, each of these reaches into RLlib's, torch's or gymnasium's private state
# under a name that also happens to be underscored somewhere in our code, or that the class it is in
# does not define: the scan finds each.
PLANTED = {
    "runner._sample(num_timesteps=10)": "._sample",
    "learner._optimizers.clear()": "._optimizers",
    "n = sum(p.numel() for p in net._parameters.values())": "._parameters",
    "cap = env._max_episode_steps": "._max_episode_steps",
    "x = getattr(group, '_learner')": "getattr(..., '_learner')",
    # inside a class of ours that subclasses RLlib's runner but does not define _sample itself
    (
        "from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner\n"
        "class Runner(SingleAgentEnvRunner):\n"
        "    def sample(self, **kwargs):\n"
        "        return self._sample(**kwargs)\n"
    ): "._sample",
    # our subclass assigning RLlib's private state as if it were its own
    (
        "from ray.rllib.core.learner.torch.torch_learner import TorchLearner\n"
        "class Learner(TorchLearner):\n"
        "    def build(self):\n"
        "        self._optimizer_parameters = {}\n"
    ): "._optimizer_parameters",
    # overriding a private method of RLlib's that internals.OVERRIDDEN does not list
    (
        "from ray.rllib.env import single_agent_env_runner as runners\n"
        "class Runner(runners.SingleAgentEnvRunner):\n"
        "    def _reset_envs_and_episodes(self, explore):\n"
        "        pass\n"
    ): "def _reset_envs_and_episodes",
    # a plain class of ours naming _sample for itself does not make runner._sample ours
    (
        "class Pool:\n"
        "    def _sample(self):\n"
        "        return 1\n"
        "def draw(runner):\n"
        "    return runner._sample()\n"
    ): "._sample",
}


@pytest.mark.parametrize("code", list(PLANTED), ids=[PLANTED[c] for c in PLANTED])
def test_the_scan_finds_a_planted_private_use_in_training(code):
    assert [what for _, what in scan(code)] == [PLANTED[code]]


def test_the_scan_leaves_our_own_private_names_alone():
    code = (
        "import functools\n"
        "from envsdk.training.planted import _helper\n"
        "def _helper(x, *, _depth=0):\n"
        "    return x\n"
        "class Cache:\n"
        "    _limit = 3\n"
        "    def __init__(self):\n"
        "        self._cache = {}\n"
        "    def get(self, key):\n"
        "        return self._cache.get(key, _helper(key, _depth=1)) or self._limit\n"
        "class Sized(Cache):\n"
        "    def size(self):\n"
        "        return len(self._cache)\n"
        "from ray.rllib.env.single_agent_env_runner import SingleAgentEnvRunner\n"
        "class Runner(SingleAgentEnvRunner):  # a deliberate override, listed in internals.OVERRIDDEN\n"
        "    def _sample(self, **kwargs):\n"
        "        return super()._sample(**kwargs)\n"
        "    def sample(self, **kwargs):\n"
        "        self._envsdk_calls = 1\n"
        "        return self._sample(**kwargs)\n"
        "def size(cache):\n"
        "    return len(cache._envsdk_calls)\n"
    )
    assert scan(code) == []


def test_a_name_that_internals_assigns_is_still_private_elsewhere():
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
    assert scan(f"x = runner.{planted}\n") == [(1, f".{planted}")], planted
