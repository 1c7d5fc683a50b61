"""YAML loading that remembers where every key came from.

Error messages name ``file:line`` for a bad key, so mappings are loaded into a
dict subclass carrying the line of each key.  A key given twice in one
mapping is an error (plain YAML keeps the last one without a word).  The loader also reads ``1e-5``
as a float (plain YAML 1.1 would read it as a string, a classic trap for
learning rates).
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

import yaml

from envsdk.errors import UserError, did_you_mean


class LineDict(dict):
    """A mapping that knows the source line of each key (1-based)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lines: dict[Any, int] = {}
        self.source: Path | None = None

    def where(self, key: Any) -> str:
        """``file:line`` of ``key`` (or of the mapping's file if unknown)."""
        src = str(self.source) if self.source else "<config>"
        line = self.lines.get(key)
        return f"{src}:{line}" if line else src


def where_of(mapping: Any, key: Any, fallback: str) -> str:
    """``file:line`` of ``key`` in ``mapping`` when it was read from YAML (a :class:`LineDict` that
    knows the key's line), else ``fallback`` (a mapping from the command line or built in code)."""
    if isinstance(mapping, LineDict) and key in mapping.lines:
        return mapping.where(key)
    return fallback


def settings_from(cls: Any, value: dict, where: str, section: str) -> Any:
    """The settings dataclass ``cls`` from a YAML mapping (``self_play:``, ``atari_preprocessing:``);
    a key that is no field of it is a UserError naming the nearest one."""
    names = [f.name for f in dataclasses.fields(cls)]
    for key in value:
        if key not in names:
            raise UserError(
                f"{where}: unknown {section} setting '{key}'",
                did_you_mean(str(key), names) or f"{section} settings: {', '.join(names)}",
            )
    return cls(**value)


def merge(base: dict, extra: dict) -> dict:
    """``extra`` over ``base``, nested dicts merged key by key (``--config.env_config.x=1``; RLlib
    merges ``evaluation_config.env_config`` over ``env_config`` the same way)."""
    out = dict(base)
    for key, value in extra.items():
        nested = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merge(out[key], value) if nested else value
    return out


class _Loader(yaml.SafeLoader):
    source_path: Path | None = None  # the file being read, for error messages


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    mapping = LineDict()
    mapping.source = getattr(loader, "source_path", None)
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        if key in mapping:  # plain YAML keeps the last one silently
            raise UserError(
                f"{mapping.where(key)}: '{key}' is given twice in one mapping (again at line {line})",
                "keep one of the two lines",
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
        mapping.lines[key] = line
    return mapping


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def load_yaml_text(text: str, source: Path | None = None) -> Any:
    """Parse YAML text; syntax errors become a UserError naming file and line."""
    loader = _Loader(text)
    loader.source_path = source
    try:
        return loader.get_single_data()
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{source or '<text>'}:{mark.line + 1}" if mark else str(source or "<text>")
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise UserError(
            f"{where}: invalid YAML ({problem})",
            "check indentation and that every 'key: value' has a space after the colon",
        ) from err
    finally:
        loader.dispose()


def load_yaml_file(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"config file not found: {path}", "pass an existing YAML file with -f")
    return load_yaml_text(path.read_text(), source=path)


def parse_scalar(text: str) -> Any:
    """Parse a command-line value as YAML (``0.001``, ``[64, 64]``, ``true``)."""
    return load_yaml_text(text) if text.strip() else ""
