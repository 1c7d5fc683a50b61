"""A checkpoint outlives an upgrade: what an earlier commit trained rolls out, exports and resumes.

``tests/data/checkpoints/<commit>/`` holds checkpoints that the code of ``<commit>``
wrote (``tests/data/checkpoints/make.py``), one per kind: single-agent PPO, SAC,
DQN (0.3.0's, before envsdk's DQN learner), multi-agent, self-play, a ModelV2
plugin, an RLModule plugin and a Unity game on the stand-in.  Every set stays:
each later commit must still read all of them.
The files are copied first (a rollout writes beside its checkpoint), and the
env modules are found as a user who moved the checkpoint would find them: on
``PYTHONPATH``, since the folders recorded in the checkpoint are gone.  A format-1
checkpoint kept with its experiment's YAML (``<kind>.yaml``) gets that YAML where its
manifest says, as a user who kept it would have it: it is built again from it.
"""

from __future__ import annotations

import importlib
import json
import pickle
import re
import shutil
import sys
from pathlib import Path

import pytest

from envsdk import internals, moved
from envsdk.errors import UserError
from envsdk.evaluation import restore
from envsdk.evaluation.restore import load
from envsdk.training.hooks.episode_window import log_episode
from envsdk.training.run.checkpoints import FORMAT, MANIFEST, read_manifest, write_manifest
from tests.helpers import ROOT, rollout_here, run_group, run_train

SETS = ROOT / "tests" / "data" / "checkpoints"
KEPT = [  # (checkpoint, its kind's config and train.py arguments)
    (folder / kind, about["kinds"][kind])
    for folder in sorted(p for p in SETS.iterdir() if (p / "about.json").is_file())
    for about in [json.loads((folder / "about.json").read_text())]
    for kind in about["kinds"]
]


def test_every_format_is_kept() -> None:
    """A set of checkpoints in each format up to today's, so that each migration stays tested."""
    formats = {manifest_format(checkpoint) for checkpoint, _ in KEPT}
    assert formats == set(range(1, FORMAT + 1))


def with_our_hook_renamed(kept: Path, folder: Path, format: int) -> Path:
    """A copy of ``kept`` whose pickles name a hook of ours that this code does not have (as after a
    rename), its manifest in ``format`` (format 1 has no experiment_spec) and matching its files."""
    checkpoint = folder / "checkpoint"
    shutil.copytree(kept, checkpoint)
    for pickled in checkpoint.rglob(internals.PIECE_CLASS_FILE):  # same length: the pickles stay valid
        pickled.write_bytes(pickled.read_bytes().replace(b"record_errors", b"record_errorz"))
    manifest = read_manifest(checkpoint)
    assert manifest is not None
    run = (
        manifest["run"]
        if format > 1
        else {k: v for k, v in manifest["run"].items() if k != "experiment_spec"}
    )
    write_manifest(checkpoint, run, manifest["result"])
    written = json.loads((checkpoint / MANIFEST).read_text())
    (checkpoint / MANIFEST).write_text(json.dumps({**written, "format": format}))
    return checkpoint


def test_a_checkpoint_loads_with_none_of_our_code_unpickled(tmp_path: Path) -> None:
    """Format 2 builds the config again from the manifest, so our hooks' names in the pickles do not
    matter; format 1 unpickles them, and where one is gone says which version wrote the checkpoint."""
    kept = next(c for c, _ in KEPT if c.name == "cartpole-ppo" and manifest_format(c) == FORMAT)
    restored = load(with_our_hook_renamed(kept, tmp_path / "now", FORMAT))
    assert restored.algorithm == "PPO" and restored.env.name == "CartPole-v1"
    assert not restored.config.is_multi_agent
    # Our hooks are today's objects (built again), stock mode or not.
    assert log_episode in restored.config.callbacks_on_episode_end
    with pytest.raises(UserError) as refused:
        load(with_our_hook_renamed(kept, tmp_path / "then", 1))
    said = str(refused.value)
    assert "was written by envsdk 0.3.0" in said and "record_errorz" in said, said
    assert "roll it out or export it with envsdk 0.3.0" in said, said


@pytest.mark.parametrize("old", sorted(moved.MOVED))
def test_a_module_path_that_has_moved_unpickles_as_todays_class(old: str, tmp_path: Path) -> None:
    """Checkpoints name our classes by module path (envsdk/moved.py): an old path is today's module,
    the same object, and a pickle naming a class by it loads today's class, with RLlib's plain pickle."""
    new = importlib.import_module(moved.MOVED[old])
    assert importlib.import_module(old) is new
    classes = [c for c in vars(new).values() if isinstance(c, type) and c.__module__ == new.__name__]
    for cls in classes[:3]:
        path = tmp_path / f"{cls.__name__}.pkl"
        path.write_bytes(
            b"\x80\x02c" + f"{old}\n{cls.__qualname__}\n".encode() + b"."
        )  # the class, protocol 2
        assert pickle.loads(path.read_bytes()) is cls
        assert restore._unpickle(path, restore.WrittenBy(ray="2.60.0", envsdk="0.2.0")) is cls


def test_an_old_package_path_loads_no_module_twice() -> None:
    """``envsdk.envs.default_models.catalogs`` is ``envsdk.networks.catalogs``, not a second copy
    that Python's path finder would load through the old package's ``__path__``."""
    import envsdk.networks.catalogs as new

    assert importlib.import_module("envsdk.envs.default_models.catalogs") is new
    assert not [
        name
        for name, module in sys.modules.items()
        if module is not None
        and name.startswith("envsdk.envs.default_models.")
        and getattr(module, "__name__", "") == name
    ]


def with_its_yaml(kept: Path, checkpoint: Path) -> Path:
    """The copy ``checkpoint`` of ``kept`` with the YAML its run was trained from (kept beside, as
    ``<kind>.yaml``) where the manifest's ``config_file`` names it, as where the user left it."""
    yaml = kept.parent / f"{kept.name}.yaml"
    if yaml.is_file():
        where = checkpoint.parent / "configs" / yaml.name
        where.parent.mkdir(exist_ok=True)
        shutil.copyfile(yaml, where)
        manifest = json.loads((checkpoint / MANIFEST).read_text())
        manifest["run"]["config_file"] = str(where)
        (checkpoint / MANIFEST).write_text(json.dumps(manifest))
    return checkpoint


KEPT_WITH_YAML = [c for c, _ in KEPT if (c.parent / f"{c.name}.yaml").is_file()]


@pytest.mark.parametrize("kept", KEPT_WITH_YAML, ids=[f"{c.parent.name}-{c.name}" for c in KEPT_WITH_YAML])
def test_a_format_1_checkpoint_whose_hook_changed_loads_from_its_yaml_or_is_refused_in_one_line(
    kept: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8fda456's config calls a hook of ours whose signature changed since (a full traceback once,
    when the env runner called it): with its YAML where the manifest says, the config is built again
    from it, the trial's own values (its 32x32 network) on top; without it, one line says who wrote
    the checkpoint and what to do."""
    monkeypatch.syspath_prepend(str(ROOT / "configs"))  # the env's module, here and in rollout.py
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "configs"))
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(kept, checkpoint)
    rollout = [sys.executable, str(ROOT / "rollout.py"), str(checkpoint), "--episodes", "1", "--no-out"]
    refused = run_group(rollout, timeout=120)
    said = refused.stderr
    assert refused.returncode == 2 and "Traceback" not in said, said[-2000:]
    assert "written by envsdk 0.1.0 (checkpoint format 1)" in said and "put the run's YAML back" in said, said
    assert len([line for line in said.splitlines() if line.startswith(("error:", "  fix:"))]) == 2, said

    restored = load(with_its_yaml(kept, checkpoint))
    assert restored.config.model_config["fcnet_hiddens"] == [32, 32]  # the trial's override, kept
    assert internals.convert_done_episodes_once not in (
        restored.config.callbacks_on_environment_created or []
    )
    # In its trial's folder, the trial's params.json (plain JSON, as Tune writes it) is what it ran with.
    params = restore._pickled_config(checkpoint, restore.WrittenBy("2.60.0", "0.1.0"))[1].to_dict()
    model = internals.MODEL_CONFIG_FIELD  # where to_dict() keeps model_config
    params[model] = {**params[model], "fcnet_hiddens": [8]}
    (checkpoint.parent / restore.TRIAL_PARAMS).write_text(
        json.dumps(params, default=lambda o: f"<{type(o).__name__}>")
    )
    assert load(checkpoint).config.model_config["fcnet_hiddens"] == [8]


def manifest_format(checkpoint: Path) -> int:
    return int(json.loads((checkpoint / MANIFEST).read_text())["format"])


def result_of(checkpoint: Path) -> dict:
    result: dict = json.loads((checkpoint / MANIFEST).read_text())["result"]
    return result


@pytest.mark.slow
@pytest.mark.parametrize(("kept", "kind"), KEPT, ids=[f"{c.parent.name}-{c.name}" for c, _ in KEPT])
def test_rolls_out_exports_and_resumes(
    kept: Path, kind: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, standin_builds: Path
) -> None:
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(kept, checkpoint)
    with_its_yaml(kept, checkpoint)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "configs"))  # the resumed run's (train.py below)
    monkeypatch.syspath_prepend(str(ROOT / "configs"))  # the rollout's, run in this process
    rollout = [str(checkpoint), "--episodes", "1", "--no-out"]
    rollout += ["--export-onnx", str(tmp_path / "policy.onnx")]
    if kept.name.startswith("unity"):
        rollout += ["--export-unity", str(tmp_path / "brains")]
        if json.loads((kept / MANIFEST).read_text())["format"] == 1:
            # Its config, unpickled, holds the player's path of the day: the user names where it is now.
            # Format 2 builds the config again, and finds builds/Chase as training would.
            rollout += ["--env-config", json.dumps({"file_name": str(standin_builds / "Chase")})]
    out = rollout_here(*rollout)  # rollout.py's code: a process of its own paid Python's and RLlib's start
    said = out.stdout + out.stderr
    assert out.returncode == 0, said[-3000:]
    assert re.search(r"episode 1: return -?\d", said), said[-2000:]
    exported = re.findall(r"^onnx: (\S+) \(policy .*checked against torch with onnxruntime\)", said, re.M)
    assert exported and all(Path(f).stat().st_size > 0 for f in exported), said[-2000:]
    if kept.name.startswith("unity"):
        assert (tmp_path / "brains" / "brains.json").is_file(), said[-2000:]

    runs = tmp_path / "runs"
    config = ROOT / "configs" / f"{kind['config']}.yaml"
    args = ["-f", str(config), "--restore", str(checkpoint), "--stop-iters", "1"]
    trained = run_train([*args, "--storage-path", str(runs), *kind["args"]], timeout=240)
    assert trained.returncode == 0, (trained.stdout + trained.stderr)[-3000:]
    resumed = result_of(sorted(runs.glob("*/*/checkpoint_*"))[-1])
    before = result_of(kept)
    # It went on from the checkpoint's state: one more iteration, and its env steps on top.
    assert resumed["training_iteration"] == before["training_iteration"] + 1
    assert resumed["num_env_steps_sampled_lifetime"] > before["num_env_steps_sampled_lifetime"]


@pytest.mark.slow
def test_a_moved_unity_checkpoint_rolls_out_with_its_player_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, standin_builds: Path
) -> None:
    """Today's format builds the config again from the manifest, player included: where the player is
    not where training found it, the fix line says how to name it, and the rebuild takes the name."""
    kept = next(c for c, _ in KEPT if c.name == "unity-chase" and manifest_format(c) == FORMAT)
    checkpoint = tmp_path / "checkpoint"
    shutil.copytree(kept, checkpoint)
    monkeypatch.delenv("ENVSDK_PLAYER_PATH")  # the folder training found builds/Chase in
    rollout = [sys.executable, str(ROOT / "rollout.py"), str(checkpoint), "--episodes", "1", "--no-out"]
    lost = run_group(rollout, cwd=tmp_path, timeout=120)
    assert lost.returncode == 2 and "Traceback" not in lost.stderr, lost.stderr[-2000:]
    assert "not found" in lost.stderr and "rollout.py --env-config '{file_name: PATH}'" in lost.stderr
    named = json.dumps({"file_name": str(standin_builds / "Chase")})
    found = run_group([*rollout, "--env-config", named], cwd=tmp_path, timeout=240)
    assert found.returncode == 0, (found.stdout + found.stderr)[-2000:]
    assert re.search(r"episode 1: return -?\d", found.stdout), found.stdout[-2000:]


def test_a_module_under_an_old_package_path_is_todays_and_keeps_its_own_spec() -> None:
    """Any module under ``envsdk.envs.default_models`` is today's ``envsdk.networks`` one (listed in
    MOVED or not), and today's modules keep their own ``__spec__`` after an old path named them."""
    import envsdk.networks
    import envsdk.networks.plugins

    assert importlib.import_module("envsdk.envs.default_models.plugins") is envsdk.networks.plugins
    assert importlib.import_module("envsdk.envs.default_models") is envsdk.networks
    assert envsdk.networks.__spec__.name == "envsdk.networks"
    assert envsdk.networks.plugins.__spec__.name == "envsdk.networks.plugins"
    assert moved.today("envsdk.training.guards") == "envsdk.training.hooks.faults"
    assert moved.today("envsdk.training.hooks.faults") is None  # today's paths are not answered


def test_the_faults_are_named_where_the_faults_module_had_them() -> None:
    """``envsdk.envs.faults`` was a module of fault classes and is a package now: the names hold."""
    from envsdk.envs.faults import EnvFault, EnvStalled, ObservationFault, RewardFault
    from envsdk.envs.faults.records import EnvFault as Today

    assert EnvFault is Today and {EnvStalled, ObservationFault, RewardFault} <= set(Today.__subclasses__())
