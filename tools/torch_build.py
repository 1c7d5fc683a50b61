"""Install the torch build the Makefile's ``TORCH`` names, at the version requirements.lock pins.

    python tools/torch_build.py install cpu|cuda|auto   (the Makefile runs this first, in the venv)
    python tools/torch_build.py lock                    (rewrites requirements-cuda.lock from PyPI)

* ``cpu``: PyTorch's CPU wheel index (a wheel of about 200 MB; no CUDA packages).
* ``cuda``: PyPI's build, which on Linux x86_64 is the CUDA one (several GB), with the CUDA
  packages it pulls pinned by requirements-cuda.lock, so two installs a week apart agree.
* ``auto`` (the default): ``cpu`` where PyTorch's CPU index answers within a few seconds, else
  PyPI's build, with a note saying so.

Only the standard library is used: this runs before anything else is installed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
CUDA_LOCK = ROOT / "requirements-cuda.lock"
CPU_INDEX = os.environ.get("TORCH_CPU_INDEX", "https://download.pytorch.org/whl/cpu")
PYPI = "https://pypi.org/simple"
CHOICES = ("cpu", "cuda", "auto")


def pins(path: Path) -> dict[str, str]:
    """A lock file's ``name==version`` lines, by normalized name (PEP 503: ``typing-extensions``)."""
    found = {}
    for line in path.read_text().splitlines():
        name, sep, version = line.partition("==")
        if sep and not line.startswith("#"):
            found[normalized(name)] = version.strip()
    return found


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name.strip()).lower()


def pinned_torch() -> str:
    """``torch==X`` as requirements.lock pins it."""
    version = pins(LOCK).get("torch")
    if version is None:
        raise SystemExit(f"{LOCK.name} pins no torch")
    return f"torch=={version}"


def reachable(url: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/torch/", timeout=timeout) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


PIP_INSTALL = [sys.executable, "-m", "pip", "install", "-q"]


def pip(*args: str) -> None:
    subprocess.run([*PIP_INSTALL, *args], check=True)


def install(choice: str) -> None:
    """Install torch as ``choice`` says."""
    torch = pinned_torch()
    if choice == "auto":
        choice = "cpu" if reachable(CPU_INDEX) else "cuda"
        if choice == "cuda":
            print(
                f"note: PyTorch's CPU index ({CPU_INDEX}) did not answer; installing {torch} from PyPI,"
                " the CUDA build on Linux x86_64 (several GB) unless pip finds a local CPU wheel."
                " `make ... TORCH=cpu` insists on the CPU index.",
                file=sys.stderr,
            )
    if choice == "cpu":
        # The CPU index serves torch; everything else comes from the usual indexes, at the lock's pins.
        pip(torch, "--extra-index-url", CPU_INDEX, "-c", str(LOCK))
    else:
        pip(torch, "-c", str(LOCK), "-c", str(CUDA_LOCK))


def installed() -> str:
    """The torch this interpreter now imports, and its build."""
    probe = "import torch; print(torch.__version__, torch.version.cuda or '')"
    version, _, cuda = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.partition(" ")
    return f"{version}, " + (f"the CUDA {cuda.strip()} build" if cuda.strip() else "the CPU build")


def lock() -> None:
    """Resolve the pinned torch on PyPI alone, and pin what it adds to requirements.lock's packages."""
    locked = pins(LOCK)
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_FIND_LINKS": "", "PIP_EXTRA_INDEX_URL": ""}
        resolve = ["--dry-run", "--ignore-installed", "--report", str(report), "--index-url", PYPI]
        subprocess.run([*PIP_INSTALL, *resolve, pinned_torch()], check=True, env=env)
        items = json.loads(report.read_text())["install"]
    extra = sorted(
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in items
        if normalized(item["metadata"]["name"]) not in locked
    )
    header = [
        f"# What PyPI's {pinned_torch()} (the CUDA build on Linux x86_64) installs beyond requirements.lock",
        f"# (resolved with Python {sys.version_info.major}.{sys.version_info.minor};"
        " the CUDA packages are the same on 3.11-3.13).",
        "# Written by `python tools/torch_build.py lock`; used by `make ... TORCH=cuda`.",
    ]
    CUDA_LOCK.write_text("\n".join(header + extra) + "\n")
    print(f"{CUDA_LOCK.name}: {len(extra)} packages")


def main(argv: list[str]) -> int:
    if argv[:1] == ["lock"]:
        lock()
        return 0
    if len(argv) == 2 and argv[0] == "install" and argv[1] in CHOICES:
        install(argv[1])
        print(f"torch: {installed()}")
        return 0
    print(f"usage: torch_build.py install {'|'.join(CHOICES)}  |  torch_build.py lock", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
