"""The smaller ``envsdk`` commands: ``check``, ``new``, ``export``, ``completion`` and ``legacy-table``."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from envsdk.config.yamlio import parse_scalar
from envsdk.errors import said_under


def _parser(prog: str, description: str, examples: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description=description,
        epilog="examples:\n" + examples,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p


def check(argv: list[str], prog: str = "envsdk check") -> int:
    p = _parser(
        prog,
        "Check an env: spaces, seeded resets, gymnasium's and RLlib's checkers, step rate, default model.",
        f"  {prog} CartPole-v1\n  {prog} custom_env.CustomEnv --env-config '{{length: 8}}' --steps 500",
    )
    p.add_argument("env", help="gymnasium id, registered id or module.Class")
    p.add_argument("--env-config", default="{}", help="env_config as YAML/JSON, e.g. '{size: 2}'")
    p.add_argument("--steps", type=int, default=2000, help="random steps to take")
    args = p.parse_args(argv)
    from envsdk.envs.checkup.verdict import check_env
    from envsdk.envs.registry import resolve_env
    from envsdk.networks.choice import describe

    resolved = resolve_env(args.env, [Path.cwd()])
    report = check_env(
        resolved,
        dict(parse_scalar(args.env_config) or {}),
        steps=args.steps,
        describe=describe,
    )
    print(report.render())
    if report.error is not None and args.debug:
        import traceback

        traceback.print_exception(report.error)
    elif report.error is not None:
        print("(--debug shows the env's traceback)")
    return 0 if report.ok else 1


def new(argv: list[str], prog: str = "envsdk new") -> int:
    p = _parser(
        prog,
        "Write a new env file, its experiment YAML and a passing test.",
        f"  {prog} gridworld --dir myproject",
    )
    p.add_argument("name")
    p.add_argument("--dir", default=".", help="folder to write into")
    p.add_argument("--force", action="store_true", help="overwrite existing files")
    args = p.parse_args(argv)
    from envsdk.cli.scaffold import scaffold

    for path in scaffold(args.name, Path(args.dir), args.force):
        print(f"wrote {path}")
    return 0


def export(argv: list[str], prog: str = "envsdk export") -> int:
    p = _parser(
        prog,
        "Write a checkpoint's policy network as ONNX (one file per policy for multi-agent runs).",
        f"  {prog} ~/ray_results/cartpole-ppo policy.onnx",
    )
    p.add_argument("checkpoint", help="checkpoint, trial or experiment folder")
    p.add_argument("file", help="the .onnx file to write")
    args = p.parse_args(argv)
    from envsdk.cli import rollout

    with said_under({"--export-onnx": prog}):  # the user typed no --export-onnx; the rest as rollout said
        return rollout.main([args.checkpoint, "--export-onnx", args.file], prog=prog)


def completion(argv: list[str], prog: str = "envsdk completion") -> int:
    p = _parser(
        prog,
        "Print a bash completion script for envsdk: its commands, then each command's flags and file names.",
        f"  source <({prog})            # this shell\n  {prog} >> ~/.bashrc",
    )
    p.parse_args(argv)
    import contextlib
    import io

    from envsdk.cli.main import COMMANDS, main

    cases = []
    for name in COMMANDS:  # each command's flags, read from its own --help
        help_text = io.StringIO()
        with contextlib.redirect_stdout(help_text), contextlib.suppress(SystemExit):
            main([name, "--help"])
        words = {w.strip(",[]") for w in help_text.getvalue().split()}
        flags = sorted(w for w in words if re.fullmatch(r"--[a-z][a-z0-9-]*", w))
        cases.append(f'    {name}) words="{" ".join(flags)}" ;;')
    print(
        "_envsdk() {\n"
        '  local cur="${COMP_WORDS[COMP_CWORD]}" words\n'
        '  if [ "$COMP_CWORD" -eq 1 ]; then\n'
        f'    COMPREPLY=($(compgen -W "{" ".join(COMMANDS)}" -- "$cur")); return\n'
        "  fi\n"
        '  case "${COMP_WORDS[1]}" in\n' + "\n".join(cases) + "\n  esac\n"
        '  if [[ "$cur" == -* ]]; then COMPREPLY=($(compgen -W "$words" -- "$cur"));\n'
        '  else COMPREPLY=($(compgen -f -- "$cur")); fi\n'
        "}\n"
        "complete -o filenames -F _envsdk envsdk"
    )
    return 0


def legacy_table(argv: list[str], prog: str = "envsdk legacy-table") -> int:
    _parser(prog, "Print the table of Ray 1.x names and what they became.", f"  {prog}").parse_args(argv)
    from envsdk.config.legacy import legacy_table_markdown

    print(legacy_table_markdown())
    return 0
