"""Each layer speaks its own language: errors are typed, and only the command line names its flags.

A lower layer raises a :class:`~envsdk.errors.UserError` (or unity_bridge's own typed errors) whose
subject is its own ("ONNX export: ..."); the command line says it again under the flag the user
typed (``UserError.under``).  No bare built-in exception is raised where it can reach a user.
"""

from __future__ import annotations

import ast
import builtins
import re
from pathlib import Path

import pytest

from envsdk.errors import UserError
from tests.helpers import ROOT

SCANNED = [
    p
    for package in ("envsdk", "unity_bridge")
    for p in sorted((ROOT / package).rglob("*.py"))
    if "protocol" not in p.relative_to(ROOT).parts and not p.name.endswith("_pb2.py")
]

# Errors only: SystemExit and KeyboardInterrupt (BaseException's) are exits, raised on purpose.
BUILTIN_ERRORS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, Exception)
}

_ABSTRACT = "an abstract method: a subclass's to write, never reached by a user"
_SETTINGS = "caught in LaunchSettings.from_config and raised again as a SettingsError with a fix"

# (file, function) -> why a bare built-in exception may be raised there.
ALLOWED = {
    ("envsdk/__init__.py", "__getattr__"): "a module __getattr__ must raise AttributeError (PEP 562)",
    ("envsdk/envs/checker.py", "__getattr__"): "a module __getattr__ must raise AttributeError (PEP 562)",
    ("envsdk/envs/multi_agent_wrapper.py", "MultiAgentWrapper.__getattr__"): (
        "__getattr__'s protocol: AttributeError lets hasattr/getattr defaults work"
    ),
    ("envsdk/envs/spaces.py", "branch_sizes"): "a programming assertion: callers pass discrete parts only",
    ("envsdk/envs/faults/guard.py", "Guard._prepare"): _ABSTRACT,
    ("envsdk/envs/faults/guard.py", "Guard._count"): _ABSTRACT,
    ("envsdk/envs/faults/guard.py", "Guard._check_observations"): _ABSTRACT,
    ("envsdk/envs/faults/guard.py", "Guard._check_rewards"): _ABSTRACT,
    ("envsdk/evaluation/evaluator.py", "Evaluator._make_env_runner"): (
        "an invariant of RLlib's env runner (it always builds a module from a checkpoint's config); "
        "a traceback is what a report of it needs"
    ),
    ("envsdk/internals/sampling.py", "_EnvRunnerState._step_failed"): (
        "RLlib's own `raise RuntimeError from error`, kept as RLlib raises it; errors.root_cause reports "
        "the env's error it chains"
    ),
    ("envsdk/networks/encoder.py", "SpaceEncoderConfig.build"): (
        "RLlib's catalog API: only our torch catalogs build it (a programming error otherwise)"
    ),
    ("envsdk/networks/encoder.py", "ObsActionEncoderConfig.build"): (
        "RLlib's catalog API: only our torch catalogs build it (a programming error otherwise)"
    ),
    ("envsdk/training/hooks/self_play.py", "SelfPlayLedger._forward"): (
        "a programming assertion: the ledger module is never mapped to an agent, so never run"
    ),
    ("envsdk/networks/reward_signals.py", "RewardSignalsModule._forward"): (
        "a programming assertion: a learner-only module, never mapped to an agent, so never run"
    ),
    ("envsdk/networks/poca.py", "GroupCriticModule._forward"): (
        "a programming assertion: a learner-only module, never mapped to an agent, so never run"
    ),
    ("envsdk/training/substitutes/poca/groups.py", "env_steps"): (
        "an assumption about RLlib's episodes (every observation in its env-step mapping) that broke:"
        " a traceback is what a report of it needs"
    ),
    ("unity_bridge/standin/teams.py", "_Teams._area"): _ABSTRACT,
    ("unity_bridge/standin/teams.py", "_Teams._setup"): _ABSTRACT,
    ("unity_bridge/standin/teams.py", "_Teams._play"): _ABSTRACT,
    ("envsdk/training/substitutes/replay/buffers.py", "TransitionReplayBuffer.sample"): (
        "RLlib's buffer API: the training step samples only once the buffer holds its warm-up rows"
    ),
    ("envsdk/training/substitutes/replay/buffers.py", "TransitionReplayBuffer.update_priorities"): (
        "a programming assertion: the learner returns one TD error per sampled row"
    ),
    ("unity_bridge/settings.py", "LaunchSettings._check_numbers"): _SETTINGS,
    ("unity_bridge/settings.py", "LaunchSettings._check_collections"): _SETTINGS,
    ("unity_bridge/settings.py", "LaunchSettings._check_rllib_keys"): _SETTINGS,
    ("unity_bridge/standin/game.py", "Game.observe"): _ABSTRACT,
    ("unity_bridge/standin/game.py", "Game.restart"): _ABSTRACT,
    ("unity_bridge/standin/game.py", "Game.reset"): _ABSTRACT,
    ("unity_bridge/standin/game.py", "Game.step"): _ABSTRACT,
    ("unity_bridge/standin/game.py", "Game.scene"): _ABSTRACT,
}


def bare_raises(source: str, name: str) -> list[tuple[str, str, str, int]]:
    """(file, function, exception, line) for each ``raise`` of a built-in error in ``source``."""
    found = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                visit(child, [*scope, child.name])
                continue
            if isinstance(child, ast.Raise) and child.exc is not None:
                exc = child.exc.func if isinstance(child.exc, ast.Call) else child.exc
                if isinstance(exc, ast.Name) and exc.id in BUILTIN_ERRORS:
                    found.append((name, ".".join(scope), exc.id, child.lineno))
            visit(child, scope)

    visit(ast.parse(source), [])
    return found


def test_scan_finds_a_planted_bare_raise():
    planted = (
        "class Thing:\n"
        "    def load(self, path):\n"
        "        if not path:\n"
        "            raise FileNotFoundError(path)\n"
        "        raise UserError('typed', 'fine')\n"
        "def check():\n"
        "    raise ValueError\n"
    )
    assert bare_raises(planted, "planted.py") == [
        ("planted.py", "Thing.load", "FileNotFoundError", 4),
        ("planted.py", "check", "ValueError", 7),
    ]


def test_no_bare_builtin_exception_reaches_a_user():
    found = [
        hit for path in SCANNED for hit in bare_raises(path.read_text(), path.relative_to(ROOT).as_posix())
    ]
    unexplained = [f"{f}:{line} {fn}: raise {exc}" for f, fn, exc, line in found if (f, fn) not in ALLOWED]
    assert not unexplained, (
        "raise a UserError (with a fix) or a typed error, or allow it here with why:\n"
        + ("\n".join(unexplained))
    )
    stale = set(ALLOWED) - {(f, fn) for f, fn, _, _ in found}
    assert not stale, f"allowed but raising no built-in error any more: {sorted(stale)}"


EXPORT_FLAGS = "--export-"  # rollout.py's --export-onnx, --export-unity


def defined_flags(source: str) -> set[str]:
    """The long flags a module's parsers define: each ``add_argument("--x", ...)``'s names."""
    return {
        arg.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
        for arg in node.args
        if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--")
    }


# Every flag of ours: what envsdk/cli/'s parsers define, and train.py's --config.KEY=VALUE (read by hand).
OUR_FLAGS = {
    f for p in sorted((ROOT / "envsdk" / "cli").glob("*.py")) for f in defined_flags(p.read_text())
} | {"--config"}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def _docstrings(tree: ast.AST) -> set[int]:
    """Docstrings, and any string that stands alone as a statement (an attribute's docstring)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    }


def flags_in_messages(source: str) -> list[tuple[int, str]]:
    """(line, flag) for each of :data:`OUR_FLAGS` named in a string, docstrings and a parser's own
    flag names (``add_argument("--x")``) aside; an f-string counts by its literal parts."""
    tree = ast.parse(source)
    skipped = _docstrings(tree) | {
        id(arg)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
        for arg in node.args
    }
    return sorted(
        {
            (node.lineno, flag)
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped
            for flag in FLAG.findall(node.value)
            if flag in OUR_FLAGS
        }
    )


def test_our_flags_are_read_from_the_parsers():
    assert {"--export-onnx", "--export-unity", "--opponent", "--team", "--video", "--restore"} <= OUR_FLAGS
    assert {
        "--ray-address",
        "--ray-num-cpus",
        "--ray-num-gpus",
        "--stop-iters",
        "--config",
        "--debug",
    } <= OUR_FLAGS
    assert "--brain" not in OUR_FLAGS  # the stand-in player's, not envsdk's


def test_flag_scan_finds_a_planted_flag_and_skips_docstrings():
    planted = (
        '"""``rollout.py --export-onnx FILE``: the module\'s docstring."""\n'
        "def export(path):\n"
        '    """--export-unity in a docstring is documentation."""\n'
        "    if path:\n"
        '        raise UserError(f"--export-onnx: {path} is wrong", "fix it")\n'
        '    raise UserError("--export-unity takes a folder")\n'
    )
    assert flags_in_messages(planted) == [(5, "--export-onnx"), (6, "--export-unity")]
    elsewhere = (
        "NAME: str = 'x'\n"
        '"""--opponent in an attribute\'s docstring is documentation."""\n'
        "def choose(p, team):\n"
        '    p.add_argument("--team", help="a parser\'s own flag, defined")\n'
        '    notice(f"playing {team}; --team {team} is not a team (drop --stop-iters)")\n'
        '    raise UserError("--brain or --video-dirs: not ours", "pass --config.lr=0.1")\n'
    )
    assert flags_in_messages(elsewhere) == [(5, "--stop-iters"), (5, "--team"), (6, "--config")]


BELOW_CLI = [p for p in SCANNED if p.relative_to(ROOT).parts[:2] != ("envsdk", "cli")]

_DEBUG = "every command takes --debug (errors.run_cli reads it): a hint to rerun with it holds anywhere"
_TRAIN_ONLY = "reached from train.py only: the hint names the flag of that command the user may type next"
_NEXT_COMMAND = "a hint that names another command to run next, with its flags (not the command running)"
_SCRIPT = "the sbatch script it writes runs train.py with this flag"
_RAYS = (
    "Ray's own flag in the script it writes (`ray stop --force`, `ray start --num-gpus=`), spelt like ours"
)
_CHECKPOINTS = _NEXT_COMMAND + ": train.py writes checkpoints"

# (file, flag) -> why a layer below cli/ may name one of our flags in a string.
FLAGS_ALLOWED = {
    (
        "envsdk/errors.py",
        "--debug",
    ): "run_cli reads --debug from every command's argv: the layer that owns it",
    ("envsdk/envs/checker.py", "--debug"): _DEBUG,
    ("envsdk/envs/registry.py", "--debug"): _DEBUG,
    ("envsdk/networks/choice.py", "--debug"): _DEBUG,
    ("envsdk/networks/plugins.py", "--debug"): _DEBUG,
    ("envsdk/cluster/slurm.py", "--ray-address"): _SCRIPT,
    ("envsdk/cluster/slurm.py", "--ray-num-cpus"): _SCRIPT,
    ("envsdk/cluster/slurm.py", "--ray-num-gpus"): _SCRIPT,
    ("envsdk/cluster/slurm.py", "--resume"): _SCRIPT,
    (
        "envsdk/cluster/slurm.py",
        "--num-workers",
    ): "`envsdk slurm`'s own usage: what follows -- goes to train.py",
    ("envsdk/cluster/slurm.py", "--force"): _RAYS,
    ("envsdk/cluster/slurm.py", "--num-gpus"): _RAYS,
    ("envsdk/cluster/ray_session.py", "--ray-num-gpus"): (
        "check_gpus's fix (GPU_FIX), reached from train.py only, names the flag that fakes GPUs"
    ),
    ("envsdk/config/experiment.py", "--env"): _TRAIN_ONLY + " (--env overrides both env: lines)",
    **{
        ("envsdk/config/mlagents/translate.py", flag): _TRAIN_ONLY
        + " (mlagents-learn's keys whose equivalent is a train.py flag: the docs' table and the refusals)"
        for flag in ("--env", "--resume", "--force", "--debug", "--deterministic", "--env-args")
    },
    ("envsdk/config/legacy.py", "--ray-num-gpus"): "_fake_gpus's notice: the YAML key's train.py replacement",
    ("envsdk/config/legacy.py", "--translate-algo"): "the docs' table of removed algorithms (legacy_table)",
    ("envsdk/config/legacy.py", "--video"): _NEXT_COMMAND + ": `rollout.py CKPT --video DIR` for monitor:",
    ("envsdk/config/offline.py", "--episodes"): _NEXT_COMMAND + ": rollout.py records experience files",
    ("envsdk/config/offline.py", "--out"): _NEXT_COMMAND + ": rollout.py records experience files",
    ("envsdk/training/build/built.py", "--translate-algo"): _TRAIN_ONLY + " (a removed algorithm's run:)",
    ("envsdk/training/build/translate.py", "--config"): (
        "names the --config.KEY override the user typed (train.py only) against the YAML line it overrides"
    ),
    ("envsdk/training/build/translate.py", "--translate-algo"): (
        _TRAIN_ONLY + " (why a key was dropped: the flag was given)"
    ),
    ("envsdk/training/report/outcome.py", "--episodes"): _NEXT_COMMAND + ": the summary's `evaluate it` line",
    ("envsdk/training/run/checkpoints.py", "--checkpoint-at-end"): _CHECKPOINTS,
    ("envsdk/training/run/checkpoints.py", "--checkpoint-freq"): _CHECKPOINTS,
    ("envsdk/evaluation/unity_brain.py", "--export-onnx"): (
        "reached from rollout.py's --export-unity only: its fix is that command's other export flag"
    ),
    ("envsdk/evaluation/restore.py", "--env-config"): (
        "MOVED_ENV_HINT: restore is reached from rollout.py (and `envsdk export`, which runs it); the fix "
        "is the flag of that command that gives the env_config again"
    ),
}


def test_only_the_command_line_names_its_flags():
    """A layer below cli/ says what refused in its own words; rollout.py and ``envsdk export`` add
    the flag or command the user typed (``UserError.under``)."""
    found = {
        (path.relative_to(ROOT).as_posix(), flag, line)
        for path in BELOW_CLI
        for line, flag in flags_in_messages(path.read_text())
    }
    unexplained = sorted(f"{f}:{line}: {flag}" for f, flag, line in found if (f, flag) not in FLAGS_ALLOWED)
    assert not unexplained, (
        "say it in this layer's words (the command line re-raises it .under the flag), or allow it here "
        "with why:\n" + "\n".join(unexplained)
    )
    stale = set(FLAGS_ALLOWED) - {(f, flag) for f, flag, _ in found}
    assert not stale, f"allowed but no longer named: {sorted(stale)}"


def test_the_bridge_names_no_envsdk_command():
    """unity_bridge imports nothing from envsdk: its messages name none of envsdk's commands."""
    for path in (p for p in SCANNED if p.relative_to(ROOT).parts[0] == "unity_bridge"):
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        said = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and ("rollout.py" in node.value or "train.py" in node.value or EXPORT_FLAGS in node.value)
        ]
        assert not said, f"{path.relative_to(ROOT)}: lines {said}"


def test_a_refusal_is_said_again_under_the_flag_typed():
    err = UserError("policy 'p' is recurrent", "train without use_lstm", "Unity brain export")
    assert str(err) == "Unity brain export: policy 'p' is recurrent\n  fix: train without use_lstm"
    under = err.under("--export-unity")
    assert str(under) == "--export-unity: policy 'p' is recurrent\n  fix: train without use_lstm"
    assert (under.message, under.hint, under.subject) == (
        "--export-unity: policy 'p' is recurrent",
        "train without use_lstm",
        "--export-unity",
    )


def test_envsdk_export_names_itself_not_rollouts_flag(monkeypatch):
    """``envsdk export CKPT FILE`` runs rollout.py's --export-onnx, which the user did not type."""
    from envsdk.cli import rollout, tools

    def refuse(argv: list[str], prog: str) -> int:
        raise UserError("a problem", "a fix", "ONNX export").under("--export-onnx")

    monkeypatch.setattr(rollout, "main", refuse)
    with pytest.raises(UserError) as caught:
        tools.export(["ckpt", "p.onnx"])
    assert str(caught.value) == "envsdk export: a problem\n  fix: a fix"

    def missing(argv: list[str], prog: str) -> int:
        raise UserError("no checkpoint at ckpt", "pass a checkpoint folder")

    monkeypatch.setattr(rollout, "main", missing)
    with pytest.raises(UserError) as caught:
        tools.export(["ckpt", "p.onnx"])
    assert str(caught.value).startswith("no checkpoint at ckpt")


def test_a_missing_brain_index_is_the_users_to_fix(tmp_path: Path):
    from envsdk.errors import as_user_error
    from unity_bridge.brains import BrainPlayer

    with pytest.raises(Exception) as caught:
        BrainPlayer(tmp_path)
    said = as_user_error(caught.value)
    assert said is not None and "no brains.json" in said.message and said.hint


@pytest.mark.parametrize("flag", ["--export-unity", "--export-onnx"])
def test_a_multi_agent_filter_is_refused_under_the_flag_typed(monkeypatch, tmp_path: Path, flag: str):
    """The observation filter's own refusal (an old multi-agent run's MeanStdFilter kept statistics per
    agent), reached through rollout.py's export step, names the flag typed and not the other."""
    import argparse
    import pickle
    from types import SimpleNamespace

    from envsdk.cli import rollout
    from envsdk.evaluation import onnx_export, unity_brain
    from envsdk.internals import PIECE_STATE_FILE
    from envsdk.training.hooks import observation_filter

    (tmp_path / PIECE_STATE_FILE).write_bytes(
        pickle.dumps({"clip_by_value": 10.0, "agents": {}})
    )  # per agent
    monkeypatch.setattr(observation_filter, "connector_pieces", lambda checkpoint: [checkpoint])
    monkeypatch.setattr(observation_filter, "_is_filter", lambda piece: True)  # a MeanStdFilter's state

    def filtered(restored: object) -> object:  # the statistics, before any module is read
        return observation_filter.saved_statistics(restored, None)

    monkeypatch.setattr(onnx_export, "policy_nets", filtered)
    monkeypatch.setattr(unity_brain, "policy_nets", filtered)
    monkeypatch.setattr(unity_brain, "_require_unity", lambda restored: None)  # a Unity game's run
    restored = SimpleNamespace(checkpoint=tmp_path, multi_agent=True, new_stack=True)
    out = str(tmp_path / "exported")
    args = argparse.Namespace(
        export_onnx=out if flag == "--export-onnx" else None,
        export_unity=out if flag == "--export-unity" else None,
        unity_target="sentis",
    )
    with pytest.raises(UserError) as caught:
        rollout._export(args, restored)
    said = str(caught.value)
    assert said.startswith(f"{flag}: this run's MeanStdFilter keeps statistics per agent, not per policy"), (
        said
    )
    assert "fix: train again (statistics are now kept per policy)" in said
    assert ({"--export-unity", "--export-onnx"} - {flag}).pop() not in said


def test_opponent_and_team_refusals_are_said_under_the_flag_typed(tmp_path: Path):
    """evaluation/opponents.py says what is wrong with the opponent or the team; rollout.py names the
    flag (``--opponent`` for CHOICE, else ``--team``)."""
    from envsdk.evaluation import opponents

    with pytest.raises(UserError) as caught:
        opponents.parse("best")
    assert caught.value.subject == opponents.CHOICE
    assert str(caught.value.under("--opponent")) == (
        "--opponent: 'best' is not an opponent\n  fix: choose latest, random or snapshot:N"
    )
    for text, team, subject in (("random", None, opponents.CHOICE), (None, 1, opponents.TEAM)):
        with pytest.raises(UserError) as caught:
            opponents.chosen(text, tmp_path, team)  # no self-play ledger: not a self-play checkpoint
        assert caught.value.subject == subject
        assert str(caught.value) == (
            f"{subject}: this checkpoint was not trained with self_play\n"
            "  fix: drop it (every agent plays its own policy)"
        )


def test_a_video_refusal_and_a_ray_address_refusal_name_no_flag(monkeypatch):
    import gymnasium as gym

    from envsdk.cluster import ray_session
    from envsdk.evaluation.recording import SUBJECT, frame_source

    class Blind(gym.Env):  # no render mode, no image observation
        observation_space = gym.spaces.Box(-1.0, 1.0, (4,))

    with pytest.raises(UserError) as caught:
        frame_source(Blind(), Blind.observation_space)
    assert caught.value.subject == SUBJECT
    assert str(caught.value.under("--video")).startswith(
        "--video: Blind has no rgb_array render and no image observation"
    )
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(UserError) as caught:
        ray_session.start_ray("auto")
    assert str(caught.value.under("--ray-address")) == (
        "--ray-address: the address is 'auto', but RAY_ADDRESS is not set\n  fix: give the head's host:port"
    )


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        ({"run": "DQN"}, "--run: DQN does not match the checkpoint, which was trained with PPO"),
        ({"eval_env": True}, "--eval-env: the checkpoint's run has no evaluation_config env or env_config"),
    ],
)
def test_a_restore_refusal_of_a_flags_value_is_said_under_the_flag(monkeypatch, tmp_path: Path, flags, said):
    """restore.py says what refused in its own words (the algorithm, the evaluation env); rollout.py
    says it again under the flag whose value was refused."""
    import argparse
    from types import SimpleNamespace

    from envsdk import speedups
    from envsdk.cli import rollout
    from envsdk.evaluation import restore
    from envsdk.training.run import checkpoints

    def refuse(path: Path, run: str | None, env: str | None, env_config: object, evaluation: bool) -> None:
        """load's own checks, on a PPO run whose config has no evaluation_config."""
        restore._check_algorithm(run, "PPO")
        if evaluation:
            restore._evaluation_env(restore._Stack(object, {}, None, {}, False), env)

    monkeypatch.setattr(restore, "load", refuse)
    found = SimpleNamespace(checkpoint=tmp_path, why="a test")
    monkeypatch.setattr(checkpoints, "locate", lambda path, trial: found)
    monkeypatch.setattr(speedups, "install", lambda stock: None)
    asked = {"run": None, "trial": None, "env": None, "env_config": None, "eval_env": False, **flags}
    with pytest.raises(UserError) as caught:
        rollout._restore(argparse.Namespace(checkpoint=str(tmp_path), opponent=None, team=None, **asked))
    assert caught.value.message == said
    own = caught.value.__cause__
    assert isinstance(own, UserError) and own.subject in (restore.ALGORITHM, restore.EVALUATION_ENV)
    assert "--" not in own.message and "--" not in (own.hint or "")


@pytest.mark.slow
def test_train_py_says_a_missing_restore_checkpoint_under_its_flag(tmp_path: Path):
    """The run loop says "restoring weights: no checkpoint at ..."; train.py names ``--restore``."""
    from tests.helpers import run_train

    missing = tmp_path / "nowhere"
    args = ["-f", "configs/cartpole-ppo.yaml", "--stop-iters", "1", "--restore", str(missing)]
    out = run_train([*args, "--storage-path", str(tmp_path / "results")], timeout=240)
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: --restore: no checkpoint at {missing}" in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
