"""Regenerate (or check) the Python modules compiled from communicator_objects.proto.

    python -m unity_bridge.protocol.generate          # rewrite the *_pb2 modules and stubs
    python -m unity_bridge.protocol.generate --check  # exit 1 if they are stale

The generated modules are committed so that installing envsdk needs no
compiler; tests/unity_bridge/test_unity_bridge.py (test_generated_modules_are_current) runs the check.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROTO = HERE / "communicator_objects.proto"
OUTPUTS = ("communicator_objects_pb2.py", "communicator_objects_pb2.pyi", "communicator_objects_pb2_grpc.py")


def compile_into(out_dir: Path) -> None:
    from grpc_tools import protoc

    args = [
        "protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",  # type stubs, so that mypy checks the bridge's use of the messages
        f"--grpc_python_out={out_dir}",
        str(PROTO.relative_to(ROOT)),
    ]
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {PROTO}")


def stale() -> list[str]:
    """Names of committed modules that differ from a fresh compile."""
    with tempfile.TemporaryDirectory() as tmp:
        compile_into(Path(tmp))
        fresh = Path(tmp) / PROTO.parent.relative_to(ROOT)
        return [
            name
            for name in OUTPUTS
            if not (HERE / name).exists() or (HERE / name).read_bytes() != (fresh / name).read_bytes()
        ]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report stale modules")
    args = parser.parse_args()
    if args.check:
        names = stale()
        for name in names:
            print(f"stale: {HERE / name} (run python -m unity_bridge.protocol.generate)")
        return 1 if names else 0
    compile_into(ROOT)
    print(f"wrote {', '.join(OUTPUTS)} in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
