"""Write the look-back test's checkpoints: each kind trained 2 iterations by the code of one commit.

    python tests/data/checkpoints/make.py COMMIT

unpacks COMMIT's files (``git archive``: no worktree, the repository's state is left
alone) into a temporary folder, trains each kind there with this machine's Python
(that folder's ``train.py`` imports that folder's envsdk:
the script's folder comes first on ``sys.path``), and copies each run's last
checkpoint to ``tests/data/checkpoints/<commit>/<kind>/``, the experiment's YAML as that
commit had it beside (``<kind>.yaml``: what a format-1 checkpoint is built again from where its
manifest's ``config_file`` still holds it).  ``test_checkpoint_compat.py``
then rolls out, exports and resumes every one of them with the code of the day.
Networks are narrowed to 32x32 where a config leaves RLlib's 256x256, so that
the files stay small (the kinds, not the sizes, are what is tested); ``about.json``
records each kind's config and arguments, which resuming from it needs again.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
NARROW = ["--config.model_config.fcnet_hiddens=[32, 32]"]
# kind -> (config file, extra train.py arguments)
KINDS: dict[str, tuple[str, list[str]]] = {
    "cartpole-ppo": ("cartpole-ppo", []),
    "pendulum-sac": ("pendulum-sac", NARROW),
    "cartpole-dqn": ("cartpole-dqn", NARROW),
    "multi-agent": ("multi-agent", NARROW),
    "cycles-selfplay": ("cycles-selfplay", NARROW),
    "custom-model-modelv2": ("custom-model-modelv2", []),
    "custom-model-rlmodule": ("custom-model-rlmodule", []),
    "unity-chase": ("unity-chase", NARROW),
}
LEFT_OUT = {"rollout.npz"}  # written beside a checkpoint by rollout.py, not by training


def train(tree: Path, kind: str, runs: Path) -> Path:
    config, extra = KINDS[kind]
    command = [sys.executable, "train.py", "-f", f"configs/{config}.yaml", "--stop-iters", "2"]
    command += ["--storage-path", str(runs / kind), *extra]
    subprocess.run(command, cwd=tree, check=True, timeout=900)
    return sorted((runs / kind).glob("*/*/checkpoint_*"))[-1]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("commit", help="the commit whose code writes the checkpoints")
    p.add_argument("--kinds", nargs="*", default=list(KINDS), choices=list(KINDS))
    args = p.parse_args()
    short = subprocess.run(
        ["git", "rev-parse", "--short=7", args.commit], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    out = HERE / short
    with tempfile.TemporaryDirectory(prefix="envsdk-compat-") as tmp:
        tree = Path(tmp) / "tree"
        tree.mkdir()
        files = subprocess.run(["git", "archive", args.commit], cwd=ROOT, check=True, capture_output=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=files.stdout, check=True)
        if any(kind.startswith("unity") for kind in args.kinds):
            subprocess.run(
                [sys.executable, "-m", "unity_bridge.standin", "build", "builds"], cwd=tree, check=True
            )
        version = subprocess.run(
            [sys.executable, "train.py", "--version"], cwd=tree, capture_output=True, text=True
        ).stdout.strip()
        for kind in args.kinds:
            checkpoint = train(tree, kind, Path(tmp) / "runs")
            shutil.rmtree(out / kind, ignore_errors=True)
            shutil.copytree(checkpoint, out / kind, ignore=lambda _d, names: LEFT_OUT & set(names))
            shutil.copyfile(tree / "configs" / f"{KINDS[kind][0]}.yaml", out / f"{kind}.yaml")
    # kinds written before (by this commit's code, another day) stay listed beside the new ones
    before = json.loads((out / "about.json").read_text())["kinds"] if (out / "about.json").is_file() else {}
    kinds = {**before, **{kind: {"config": KINDS[kind][0], "args": KINDS[kind][1]} for kind in args.kinds}}
    about = {
        "commit": short,
        "version": version or "0.1.0 (no --version yet)",
        "kinds": dict(sorted(kinds.items())),
    }
    (out / "about.json").write_text(json.dumps(about, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
