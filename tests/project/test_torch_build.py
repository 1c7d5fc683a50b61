"""tools/torch_build.py: the torch build the Makefile's TORCH picks, pinned by the locks."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import torch_build


def pins(path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    assert all(line.count("==") == 1 for line in lines), path
    return {name.lower(): version for name, version in (line.split("==") for line in lines)}


def test_the_torch_version_is_the_locks():
    assert torch_build.pinned_torch() == f"torch=={pins(torch_build.LOCK)['torch']}"


def test_the_cuda_lock_pins_only_what_the_main_lock_does_not():
    cuda = pins(torch_build.CUDA_LOCK)
    assert cuda and not set(cuda) & set(pins(torch_build.LOCK))
    assert "triton" in cuda and any(name.startswith("nvidia-") for name in cuda)


def test_an_index_that_does_not_answer_is_not_reachable():
    assert not torch_build.reachable("http://127.0.0.1:9/simple", timeout=2)


def test_an_unknown_build_is_refused_with_its_choices():
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "torch_build.py"), "install", "rocm"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2 and "cpu|cuda|auto" in out.stderr


def test_the_makefile_installs_torch_through_it_first():
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH  ?= auto" in makefile
    install = makefile.index("tools/torch_build.py install $(TORCH)")
    assert install < makefile.index("-c requirements.lock -e '.[test]'")
