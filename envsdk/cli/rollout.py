"""``python rollout.py CHECKPOINT --episodes 1``: evaluate, record, film and export a policy.

CHECKPOINT is a checkpoint folder, a trial folder (its best checkpoint by the
run's score attribute, else its latest) or an experiment folder (its best
trial).  Flags follow Ray 1.x ``rollout.py`` / ``rllib evaluate``.
"""

from __future__ import annotations

import argparse
import itertools
import math
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import envsdk
from envsdk import speedups
from envsdk.cli import ray1_flags
from envsdk.config.yamlio import parse_scalar
from envsdk.errors import UserError, exit_now, run_cli, said_under
from envsdk.notices import notice, quiet_rllib
from envsdk.substitutions import Stock
from unity_bridge.targets import DEFAULT_TARGET, TARGETS

DEFAULT_OUT = "rollout.npz"
DEMO = ".demo"


EXAMPLES = """examples:
  %(prog)s ~/ray_results/cartpole-ppo --episodes 3
  %(prog)s CHECKPOINT --episodes 5 --video videos/ --seed 0
  %(prog)s CHECKPOINT --steps 10000 --out experience.npz
  %(prog)s CHECKPOINT --export-onnx policy.onnx
  %(prog)s CHECKPOINT --export-unity brains/      # Unity ML-Agents models, one per behavior's policy
  %(prog)s CHECKPOINT --num-workers 4 --episodes 100 --ray-address auto
  %(prog)s CHECKPOINT --episodes 200 --opponent random   # self-play: wins, draws, losses
  %(prog)s CHECKPOINT --episodes 200 --opponent random --team 1   # ... playing the second team

CHECKPOINT: a checkpoint, a trial folder (its best checkpoint) or an experiment folder (its best trial)."""


def parser(prog: str = "rollout.py") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Evaluate a checkpoint written by train.py: returns, experience file, videos, ONNX.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "checkpoint", nargs="?", help="checkpoint, trial or experiment folder (none with --policy)"
    )
    p.add_argument(
        "--trial",
        metavar="NAME",
        help="in an experiment folder of several trials, play this one (its folder's name, or a part"
        " of it only that trial has) instead of the best by the run's score",
    )
    p.add_argument("--run", help="algorithm; optional, must match the checkpoint's")
    p.add_argument("--env", help="evaluate on this env instead of the training env")
    p.add_argument(
        "--policy",
        metavar="MODULE:FUNCTION",
        help="play a scripted policy instead of a checkpoint's: a function of the observation that"
        " returns an action (module:function or path/to/file.py:function), on --env ENV",
    )
    p.add_argument(
        "--eval-env",
        action="store_true",
        help="play the run's evaluation env and settings (evaluation_config env / env_config)",
    )
    p.add_argument("--env-config", help="env_config entries to override, as YAML/JSON: '{size: 9}'")
    p.add_argument("--episodes", type=int, help="whole episodes to play (default 1)")
    p.add_argument("--steps", type=int, help="env steps to play in total (the last episode may be cut)")
    p.add_argument(
        "--max-episode-steps",
        type=int,
        help="end an episode after this many steps (default: the env's own time limit, else"
        " 10,000: a greedy policy may never end an episode)",
    )
    p.add_argument("--num-workers", type=int, default=0, help="parallel evaluation env runners")
    p.add_argument("--num-gpus", type=float, default=0.0, help="GPUs for the evaluation workers")
    p.add_argument(
        "--explore",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="sample actions as in training (default: deterministic, --no-explore)",
    )
    p.add_argument("--seed", type=int, help="seed the envs (and exploration)")
    p.add_argument(
        "--render",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="show the env's own window (render_mode human); --no-render as rllib evaluate took it",
    )
    p.add_argument(
        "--out",
        help=f"experience file: .npz, or .demo (ML-Agents' demonstration); default CHECKPOINT/{DEFAULT_OUT}",
    )
    p.add_argument("--no-out", action="store_true", help="write no experience file")
    p.add_argument("--save-info", action="store_true", help="keep the env's info dicts in --out")
    p.add_argument("--video", "--video-dir", metavar="DIR", help="one MP4 per episode into DIR")
    p.add_argument("--monitor", action="store_true", help="Ray 1.x name: --video CHECKPOINT/monitor")
    p.add_argument("--export-onnx", metavar="FILE", help="write the policy network as ONNX")
    p.add_argument(
        "--export-unity",
        metavar="DIR",
        help="write ML-Agents brains (one .onnx per policy + brains.json) that a Unity project runs",
    )
    p.add_argument(
        "--unity-target",
        choices=sorted(TARGETS),
        default=DEFAULT_TARGET,
        help="with --export-unity: the package that loads the brains; sentis (ML-Agents 3.x/4.x, opset 15,"
        " the default) or barracuda (ML-Agents 2.x, opset 9)",
    )
    p.add_argument(
        "--opponent",
        help="self-play checkpoints: the other teams play latest (the trained policy, default), "
        "random, or snapshot:N of the pool; wins, draws and losses are reported",
    )
    p.add_argument(
        "--team",
        type=int,
        help="self-play checkpoints: the team the trained policy plays (default: the one it learned as"
        " last); e.g. 0 moves first in a board game",
    )
    p.add_argument("--ray-address", help="evaluate on this Ray cluster (with --num-workers)")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--version", action="version", version=f"%(prog)s (envsdk {envsdk.__version__})")
    ray1_flags.add_rollout_flags(p)
    return p


def _check_args(args: argparse.Namespace) -> None:
    if args.episodes is not None and args.steps is not None:
        raise UserError("--episodes and --steps both given", "pass one: whole episodes, or a step budget")
    for name in ("episodes", "steps", "max_episode_steps", "num_workers"):
        value = getattr(args, name)
        if value is not None and value < (0 if name == "num_workers" else 1):
            flag = "--" + name.replace("_", "-")
            raise UserError(f"{flag} must be positive, got {value}", "pass a count >= 1")
    if args.render and (args.video or args.monitor):
        raise UserError("--render and --video cannot be combined", "film (--video) or watch (--render)")
    if args.render and args.num_workers:
        raise UserError("--render shows a window from this process", "drop --num-workers")
    _check_policy(args)
    if args.out and not args.out.endswith((".npz", DEMO)):
        if Path(args.out).suffix not in ("", ".pkl"):
            raise UserError(
                f"--out {args.out}: the experience file is a NumPy .npz archive or an ML-Agents {DEMO} file",
                f"name it e.g. {Path(args.out).with_suffix('.npz').name}",
            )
        npz = str(Path(args.out).with_suffix(".npz"))
        notice(f"--out {args.out}: writing {npz} (the experience file is a NumPy .npz archive)")
        args.out = npz


# Flags that need a checkpoint, refused with --policy (a scripted player has no network, no run).
CHECKPOINT_FLAGS = ("run", "trial", "eval_env", "export_onnx", "export_unity", "opponent", "team", "monitor")


def _check_policy(args: argparse.Namespace) -> None:
    """A checkpoint, or --policy with --env: one of the two players."""
    if args.policy is None:
        if args.checkpoint is None:
            raise UserError(
                "no CHECKPOINT given",
                "name a checkpoint, or play a scripted one: --policy module:function --env ENV",
            )
        return
    if args.checkpoint is not None:
        raise UserError(
            f"--policy {args.policy} plays instead of a checkpoint, and {args.checkpoint} is given too",
            "drop one: the checkpoint, or --policy",
        )
    if not args.env:
        raise UserError(f"--policy {args.policy} needs the env it plays", "add --env ENV (and --env-config)")
    for name in CHECKPOINT_FLAGS:
        if getattr(args, name):
            flag = "--" + name.replace("_", "-")
            raise UserError(f"{flag} needs a checkpoint; --policy plays a function", f"drop {flag}")
    if args.num_workers or args.num_gpus:
        raise UserError("--policy plays in this process", "drop --num-workers and --num-gpus")


def _env_config(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    value = parse_scalar(text)
    if not isinstance(value, dict):
        raise UserError(f"--env-config must be a mapping, got {text!r}", "write --env-config '{size: 9}'")
    return value


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def evaluate(spec: Any, workers: int, episodes: int | None, steps: int | None, gpus: float) -> list:
    """Run the episodes in this process, or spread over ``workers`` Ray actors."""
    from envsdk.evaluation.evaluator import Evaluator

    if workers == 0:
        live = _LiveEpisode()
        counter = itertools.count(1)
        evaluator = Evaluator(  # lambdas: RLlib deep-copies its config's callbacks, and their owners
            spec, 0, on_episode=lambda r: live.ended(next(counter), r), on_step=lambda n, r: live.step(n, r)
        )
        try:
            return evaluator.run(episodes, steps)
        finally:
            live.line.clear()
            evaluator.close()
    import ray

    from envsdk.cluster.ray_session import require_gpus

    require_gpus(gpus, "--num-gpus asks for", "lower --num-gpus")
    remote = ray.remote(num_cpus=1, num_gpus=gpus / workers)(Evaluator)
    shares = [n for n in _split(episodes or steps or 0, workers) if n]
    actors = [remote.remote(spec, i + 1) for i in range(len(shares))]
    try:
        futures = [
            a.run.remote(n if episodes else None, None if episodes else n)  # type: ignore[attr-defined]
            for a, n in zip(actors, shares, strict=True)
        ]
        records = [r for batch in ray.get(futures) for r in batch]
    finally:
        for actor in actors:
            ray.kill(actor)  # type: ignore[arg-type]  # Ray types ray.remote(cls) loosely
    for number, record in enumerate(records, start=1):
        print_episode(number, record)
    return records


class _LiveEpisode:
    """A live line for the episode in progress (steps, return so far), so that a long episode is
    not mistaken for a hang: rewritten on a terminal and taken off when the episode ends; in a log,
    every 10 s from 10 s on."""

    def __init__(self) -> None:
        from envsdk.progress import ProgressLine

        self.line = ProgressLine("rollout", {}, quiet_start=True)
        self.number = 1
        self.shown = 0.0

    def step(self, steps: int, ret: float) -> None:
        now = time.monotonic()
        if now - self.shown >= 0.5:
            self.shown = now
            self.line.show(f"episode {self.number}: {steps:,} steps so far, return {ret:.2f}")

    def ended(self, number: int, record: Any) -> None:
        self.line.clear()
        print_episode(number, record)
        self.number = number + 1


def print_episode(number: int, record: Any) -> None:
    from envsdk.evaluation.evaluator import AGENT

    line = f"episode {number}: return {record.ret:.2f}, length {record.length}"
    if len(record.agents) > 1 or AGENT not in record.agents:
        line += " (" + ", ".join(f"{a} {t.ret:.2f}" for a, t in record.agents.items()) + ")"
    if record.games:
        line += " " + ", ".join(f"{policy}: {GAME_WORDS[result]}" for policy, result in record.games.items())
    if not record.complete:
        line += " [cut by --steps]"
    if record.capped:
        line += f" [ended by the cap of {record.length:,} steps (--max-episode-steps): the env ended none]"
    print(line, flush=True)


GAME_WORDS = {1.0: "win", 0.5: "draw", 0.0: "loss"}  # envsdk.training.hooks.self_play's WIN, DRAW, LOSS


def games_summary(records: list, opponent: str) -> list[str]:
    """Self-play: one line per policy, its wins, draws and losses against ``opponent``."""
    tally: dict[str, Counter[float]] = {}
    for record in records:
        for policy, result in record.games.items():
            tally.setdefault(policy, Counter())[result] += 1
    lines = []
    for policy, counts in sorted(tally.items()):
        wins, draws, losses = (counts[r] for r in GAME_WORDS)
        played = wins + draws + losses
        lines.append(
            f"{policy} against {opponent}: {wins} wins, {draws} draws, {losses} losses in {played} games"
            f" (win rate {wins / played:.2f})"
        )
    return lines


def summary(records: list) -> str:
    """Statistics over whole episodes (episodes cut by --steps are counted apart)."""

    def stats(values: list[float]) -> str:
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        return f"mean {mean:.2f}, std {std:.2f}, min {min(values):.2f}, max {max(values):.2f}"

    whole = [r for r in records if r.complete]
    cut = len(records) - len(whole)
    note = f" (+{cut} cut by --steps)" if cut else ""
    if not whole:
        return f"0 whole episodes{note}: raise --steps for statistics"
    returns = [r.ret for r in whole]
    lengths = [float(r.length) for r in whole]
    line = f"{len(whole)} episodes{note} | return {stats(returns)} | length {stats(lengths)}"
    agents = [t.ret for r in whole for t in r.agents.values()]
    if len(agents) > len(whole):  # several agents: the mean per agent, as mlagents-learn reports it
        line += f" | per agent ({len(agents)}) {stats(agents)}"
    return line


def _place_videos(records: list, folder: Path) -> None:
    """Worker-numbered files -> episode_0001.mp4 ... in the printed order."""
    for i, record in enumerate(records, start=1):
        if record.video is not None and record.video.exists():
            record.video = record.video.replace(folder / f"episode_{i:04d}.mp4")


def main(argv: list[str], prog: str = "rollout.py") -> int:
    """Restore, export if asked, play the episodes, and write what they left: a step per job."""
    args = parser(prog).parse_args(argv)
    _check_args(args)
    scripted = _scripted_function(args.policy) if args.policy else None
    checkpoint, restored, opponent = _scripted(args, scripted) if scripted else _restore(args)
    plan = _demo_plan(args, restored)
    _export(args, restored)
    if (args.export_onnx or args.export_unity) and args.episodes is None and args.steps is None:
        return 0
    video_dir = (
        Path(args.video).resolve()
        if args.video
        else (checkpoint / "monitor" if args.monitor and checkpoint else None)
    )
    staging = video_dir / ".staging" if video_dir else None
    records = _play(args, restored, opponent, staging, scripted)
    if video_dir:
        _place_videos(records, video_dir)
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
        print(f"videos: {video_dir} ({sum(r.video is not None for r in records)} MP4 files)")
    if plan is not None:
        _write_demo(args, plan, records)
    elif not args.no_out and (checkpoint is not None or args.out):
        _write_experience(args, checkpoint or restored.checkpoint, restored, records)
    return 0


def _stock(checkpoint: Path, recorded_stock: Any) -> Stock:
    """The environment's switch and the ``stock:`` the checkpoint's run recorded; one this version
    cannot read (a newer version's substitution) is named, and the environment's alone holds, as
    the rebuilt config falls back to the checkpoint's own where it cannot build."""
    try:
        return Stock.resolve(recorded_stock(checkpoint))
    except UserError as err:
        notice(f"{err.message}: the substitutions are as the environment sets them")
        return Stock.resolve()


def _restore(args: argparse.Namespace) -> tuple[Path, Any, Any]:
    """The checkpoint a path means, read back, and the opponent of a self-play run; said in lines."""
    # RLlib's import (torch, Ray, Tune), out of the collector's way unless the environment says not
    with speedups.untracked_imports(Stock.resolve()):
        from envsdk.evaluation.restore import ALGORITHM, EVALUATION_ENV, load
        from envsdk.training.run.checkpoints import locate, recorded_stock
    quiet_rllib()

    with said_under("--trial" if args.trial else {}):
        found = locate(args.checkpoint, args.trial)
    print(f"checkpoint: {found.checkpoint} ({found.why})")
    speedups.install_for_command(_stock(found.checkpoint, recorded_stock))  # the run's stock: too
    env_config = _env_config(args.env_config)
    with said_under({ALGORITHM: "--run", EVALUATION_ENV: "--eval-env"}):
        restored = load(found.checkpoint, args.run, args.env, env_config, args.eval_env)
    opponent = None
    if args.opponent is not None or args.team is not None or restored.new_stack:  # old stack: no modules
        from envsdk.evaluation.opponents import CHOICE, TEAM, chosen

        with said_under({CHOICE: "--opponent", TEAM: "--team"}):
            opponent = chosen(args.opponent, restored.module_dir, args.team)
    if opponent is not None:
        side = f"the trained policy plays team {opponent.team}, " if opponent.team is not None else ""
        print(f"self-play: {side}the other teams play {opponent}")
    print(
        f"policy: {restored.algorithm} on {restored.env.name}"
        + (" (old API stack)" if not restored.new_stack else "")
    )
    return found.checkpoint, restored, opponent


def _export(args: argparse.Namespace, restored: Any) -> None:
    """--export-onnx and --export-unity; a refusal of either is said under the flag."""
    if args.export_onnx:
        from envsdk.evaluation.onnx_export import export

        with said_under("--export-onnx"):
            written = export(restored, Path(args.export_onnx).resolve())
        for pid, path in written.items():
            print(f"onnx: {path} (policy {pid}; checked against torch with onnxruntime)")
    if args.export_unity:
        from envsdk.evaluation.unity_brain import export_brains

        folder = Path(args.export_unity).resolve()
        target = TARGETS[args.unity_target]
        with said_under("--export-unity"):
            brains = export_brains(restored, folder, target=target)
        for behavior, path in brains.items():
            print(
                f"unity brain: {behavior} -> {path} (ML-Agents model version 3, opset {target.opset} for"
                f" {target.name}; loader rules and {target.name}'s operators checked)"
            )
        print(f"unity brains: {folder / 'brains.json'}")


def _play(
    args: argparse.Namespace, restored: Any, opponent: Any, staging: Path | None, scripted: Any = None
) -> list:
    """The episodes (or steps) asked for, on RLlib's env runners; their summary printed."""
    flag = "--video" if args.video else "--monitor"
    frames = _probe_frames(restored, flag) if staging is not None else None
    workers = args.num_workers or (1 if args.num_gpus else 0)
    if workers:
        from envsdk.cluster.ray_session import SUBJECT as JOINING
        from envsdk.cluster.ray_session import start_ray

        with said_under({JOINING: "--ray-address"} if args.ray_address else {}):
            start_ray(args.ray_address, code_paths=[*restored.search_paths, Path.cwd()])
    elif args.num_gpus:
        notice("--num-gpus: evaluating on one Ray worker that holds the GPU")

    from envsdk.evaluation.evaluator import EvalSpec

    spec = EvalSpec(
        restored=restored,
        explore=args.explore,
        seed=args.seed,
        video_dir=staging,
        frames=frames,
        render=args.render,
        num_workers=workers,
        num_gpus_per_worker=args.num_gpus / workers if workers else 0.0,
        opponent=opponent,
        max_episode_steps=args.max_episode_steps,
        scripted=scripted,
    )
    episodes = None if args.steps else (args.episodes or 1)
    records = evaluate(spec, workers, episodes, args.steps, args.num_gpus)
    if not records:
        raise UserError("no episode finished", "raise --steps")
    print(summary(records))
    for line in games_summary(records, str(opponent)):
        print(line)
    return records


def _scripted_function(ref: str) -> Any:
    """--policy's function, imported (RLlib's import first, as a checkpoint's rollout has it)."""
    with speedups.untracked_imports(Stock.resolve()):
        from envsdk.evaluation.demonstrations.scripted import load_function
    quiet_rllib()
    speedups.install_for_command(Stock.resolve())
    with said_under("--policy"):
        return load_function(ref)


def _scripted(args: argparse.Namespace, function: Any) -> tuple[None, Any, None]:
    """--policy: the env it plays, its first action checked there before playing."""
    from envsdk.evaluation.demonstrations.scripted import played

    with said_under("--policy"):
        restored = played(args.env, _env_config(args.env_config), args.policy, function, args.seed)
    print(f"policy: {args.policy} (scripted) on {restored.env.name}")
    return None, restored, None


def _demo_plan(args: argparse.Namespace, restored: Any) -> Any:
    """--out FILE.demo: where the env's observations and actions go in the file, decided (or
    refused) on one env built before any episode is played; None for other --out files."""
    if args.no_out or not args.out or not args.out.endswith(DEMO):
        return None
    from envsdk.evaluation.demonstrations.recording import layout
    from envsdk.evaluation.evaluator import AGENT, EnvCreator, EvalSpec

    env = EnvCreator(EvalSpec(restored=restored), 0).make_plain(dict(restored.env_config), None)
    try:
        if restored.multi_agent:
            env.reset(seed=args.seed)  # a game names its agents once it runs
            agents = list(getattr(env, "agents", None) or env.possible_agents)
            spaces = {str(a): (env.get_observation_space(a), env.get_action_space(a)) for a in agents}
        else:
            spaces = {AGENT: (env.observation_space, env.action_space)}
    finally:
        env.close()
    with said_under("--out"):
        trained = (getattr(restored.config, "policies", None) or {}) if restored.new_stack else {}
        policies = sorted(p for p in trained if "@" not in p)  # self-play's opponents and ledger aside
        return layout(spaces, restored.env.name, restored.env.name.split("@")[0] == "unity", policies)


def _write_demo(args: argparse.Namespace, plan: Any, records: list) -> None:
    from envsdk.evaluation.demonstrations.recording import write

    out = Path(args.out).resolve()
    with said_under("--out"):
        demo = write(out, records, plan)
    print(
        f"demonstration: {out} (behavior {demo.behavior_name}: {demo.steps} steps, {demo.episodes} episodes;"
        " ML-Agents' .demo format)"
    )


def _write_experience(args: argparse.Namespace, checkpoint: Path, restored: Any, records: list) -> None:
    from envsdk.evaluation import experience

    out = Path(args.out).resolve() if args.out else checkpoint / DEFAULT_OUT
    meta = {
        "checkpoint": str(checkpoint),
        "algorithm": restored.algorithm,
        "env": restored.env.name,
        "env_config": restored.env_config,
        "explore": args.explore,
        "seed": args.seed,
        "multi_agent": restored.multi_agent,
        "episodes": len(records),
    }
    experience.write(out, records, meta, args.save_info)
    print(f"experience: {out} (numpy.load; keys epNNNN/AGENT/obs|actions|rewards|...)")


def _probe_frames(restored: Any, flag: str) -> tuple[str, tuple]:
    """Where video frames come from, decided (or refused, under ``flag``) before any episode runs."""
    from envsdk.evaluation.evaluator import AGENT, EnvCreator, EvalSpec
    from envsdk.evaluation.recording import frame_source

    env = EnvCreator(EvalSpec(restored=restored), 0).make_plain(dict(restored.env_config), "rgb_array")
    try:
        spaces = env.observation_spaces if restored.multi_agent else {AGENT: env.observation_space}
        space = next(iter(spaces.values()))
        env.reset(seed=0)
        with said_under(flag):
            return frame_source(env, space)
    finally:
        env.close()


def entry() -> None:
    exit_now(run_cli(main))
