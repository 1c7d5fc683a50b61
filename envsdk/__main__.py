"""``python -m envsdk check ENV`` and ``python -m envsdk new NAME``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from envsdk.errors import run_cli
from envsdk.yamlio import parse_scalar


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m envsdk", description="Environment tools.")
    sub = p.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="check an env against its spaces and the API checkers")
    check.add_argument("env", help="gymnasium id, registered id or module.Class")
    check.add_argument("--env-config", default="{}", help="env_config as YAML/JSON, e.g. '{size: 2}'")
    check.add_argument("--steps", type=int, default=2000, help="random steps to take")
    new = sub.add_parser("new", help="write a new env file, config and test")
    new.add_argument("name")
    new.add_argument("--dir", default=".", help="folder to write into")
    new.add_argument("--force", action="store_true", help="overwrite existing files")
    sub.add_parser("legacy-table", help="print the README's legacy-key table")
    for sp in (check, new):
        sp.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.command == "check":
        from envsdk.env_checker import check_env
        from envsdk.registry import resolve_env

        resolved = resolve_env(args.env, [Path.cwd()])
        report = check_env(resolved, dict(parse_scalar(args.env_config) or {}), steps=args.steps)
        print(report.render())
        return 0 if report.ok else 1
    if args.command == "new":
        from envsdk.scaffold import scaffold

        for path in scaffold(args.name, Path(args.dir), args.force):
            print(f"wrote {path}")
        return 0
    from envsdk.legacy import legacy_table_markdown

    print(legacy_table_markdown())
    return 0


def entry() -> None:
    sys.exit(run_cli(main))


if __name__ == "__main__":
    entry()
