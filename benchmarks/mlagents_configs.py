"""One mlagents-learn trainer config, unchanged, trained by train.py and by mlagents-learn on one game.

The file is ML-Agents' own ``config/ppo/3DBall.yaml`` (tests/data/mlagents_configs/3DBall.ppo.yaml:
buffer 12,000 agent steps, batch 64, 3 epochs, linear learning rate, 2x128 normalised, time horizon
1,000, a summary every 12,000 agent steps); the game is the stand-in's 3DBall build (12 agents in one
scene, +0.1 a step for at most 40 steps, so an agent's return tops out at 4.0).  Both tools are given
the same file and the same flags, as a user would type them:

* ours: ``python train.py 3DBall.ppo.yaml --env DIR/3DBall --no-graphics --run-id R --results-dir D
  --seed S --base-port P``;
* theirs: ``mlagents-learn 3DBall.ppo.yaml --env DIR/3DBall.x86_64`` and the same flags (mlagents-learn
  1.1.0 in the side venv of benchmarks/unity_vs_mlagents.py, made on first use).

``--base-port`` (a flag of both) keeps the games off the default port 5005, which the test suite's
players use on a shared machine.  Each side is one whole process, timed from launch to the first
summary whose mean reward per agent reaches the target, and then interrupted (SIGINT: each saves its
model and ends its game; whatever it leaves running is killed, by pid).  A summary is, on both sides,
one ``summary_freq`` of agent steps: mlagents-learn's "Mean Reward" line, and on ours a row of
progress.csv (``env_runners/agent_return_mean``, the mean reward per agent that the progress line
shows as ``per agent``; the line itself is printed at most every few seconds when stdout is a file,
so the row is read instead).  Both logs are polled at the same rate.

The target, 3.0 per agent (of 4.0): measured on the 2-core machine (seed 1, 2026-11-28), ours
passes it at its 6th summary (about 50 s from launch) and mlagents-learn at its 5th (about 93 s);
3.5 took mlagents-learn 113 s with the machine to itself (past two minutes when it is shared), and
below 2.5 the first summaries (1.8-2.2, an untrained policy's) are too close to it to say much.
Pairs alternate which side runs first.

``--game Chase``: the stand-in's Chase with 12 agents and benchmarks/trainer_configs/Chase.ppo.yaml
(configs/unity-chase.yaml's settings in mlagents-learn's keys), to 0.85 per agent.

``--game Dodgeball``: the stand-in's Dodgeball, two teams of 6 (behaviors ``Dodgeball?team=0`` and
``?team=1``; +0.1 for a knock-out, a group reward of +1 / -1 when a team is out, a draw after 40
steps) and benchmarks/trainer_configs/Dodgeball.ppo.yaml, a fixed budget instead of a target: the
game is zero-sum between the teams, so there is no mean return per agent that both tools head for.
Both sides put both teams on the one name ``Dodgeball``, but not alike.  Ours maps them to one
policy (``env_config.policy_mapping``) that plays and learns for both.  mlagents-learn 1.1.0 makes
one trainer per brain name and, without ``self_play``, gives it one policy per team: the second
team's ``add_policy`` warns ("Your environment contains multiple teams, but PPOTrainer doesn't
support adversarial games"), makes that policy the trainer's ``policy`` and builds its optimizer on
it; the first team keeps playing the policy it was given at the start, which is never updated, while
both teams' trajectories (the first's off-policy) train the second team's.  Both count their
``max_steps`` in agent steps of both teams together, and both stop by themselves there:
mlagents-learn when its trainer's step passes ``max_steps``, ours through the translation's stop
(``policy_max_steps`` and ``stop: {policy_progress/all: 1.0}``: the iteration at which the policy's
sampled agent steps reach it is the last).  Each side is timed from launch to the process's own
exit; the rows give its agent steps at exit (ours: the last progress.csv row's; mlagents-learn: its
last checkpoint's, the STEPS of Dodgeball/Dodgeball-STEPS.pt) and its last summary's mean reward per
agent, to show neither run is degenerate.  That mean is per agent-episode on both sides, but ours counts the
group reward in it (an agent's reward is its own plus its group's), mlagents-learn's "Mean Reward"
only the individual rewards (its PPO still learns from the group reward); over whole rounds the
group rewards of two teams of 6 sum to 0, so both come to about 0.1 x knock-outs per agent.
``--max-steps N`` runs a copy of the file with that budget (both sides alike).  Both write their
.onnx model before they exit (mlagents-learn's side venv exports as its torch did: see
unity_vs_mlagents.py's ``ONNX_DEFAULT``).

    python benchmarks/mlagents_configs.py [--game 3DBall|Chase|Dodgeball] [--pairs 3] [--target T]
        [--max-steps N] [--no-append]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import datetime
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine
from unity_vs_mlagents import SUMMARY, mlagents_venv

from unity_bridge.standin.build import BUILDS, write_build

# game -> (its trainer config, the stand-in's build arguments, what the config is, the default target;
# None: a fixed budget, the config's max_steps, each side timed to its own exit)
GAMES: dict[str, tuple[Path, list[str], str, float | None]] = {
    "3DBall": (
        ROOT / "tests" / "data" / "mlagents_configs" / "3DBall.ppo.yaml",
        BUILDS["3DBall"],
        "ML-Agents' 3DBall PPO config; 12 agents in one scene; +0.1 a step for at most 40 steps",
        3.0,
    ),
    "Chase": (
        ROOT / "benchmarks" / "trainer_configs" / "Chase.ppo.yaml",
        ["--game", "chase", "--agents", "12", "--max-steps", "30"],
        "configs/unity-chase.yaml's PPO in mlagents-learn's keys; 12 agents in one scene; +1 at the"
        " target, -0.01 a step",
        0.85,
    ),
    "Dodgeball": (
        ROOT / "benchmarks" / "trainer_configs" / "Dodgeball.ppo.yaml",
        ["--game", "dodgeball", "--agents", "6", "--max-steps", "40"],
        "configs/unity-dodgeball.yaml's PPO in mlagents-learn's keys, no self_play; two teams of 6 in one"
        " scene; +0.1 a knock-out, +1 / -1 to the teams at a round's end, a draw after 40 steps",
        None,
    ),
}
MULTIPLE_TEAMS = "Your environment contains multiple teams"  # mlagents-learn's add_policy, without self_play
AGENT_RETURN = "env_runners/agent_return_mean"
AGENT_STEPS = "env_runners/num_agent_steps_sampled_lifetime"
POLL_S = 0.2
# (agent steps, mean reward per agent) of each summary so far; None while the run shows none
Summaries = Callable[[], list[tuple[int, float]]]


def descendants(pid: int) -> list[tuple[int, str]]:
    """The processes under ``pid`` (games, Ray's workers), as (pid, start time) so that a pid used
    again by another process later is not mistaken for them."""
    parents: dict[int, list[tuple[int, str]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append((int(stat.parent.name), fields[19]))
    found, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            found.append(child)
            todo.append(child[0])
    return found


def end_leftovers(tree: list[tuple[int, str]]) -> int:
    """Kill what of ``tree`` still runs (the same pid and start time); how many there were."""
    left = 0
    for pid, started in tree:
        with contextlib.suppress(OSError, IndexError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19] == started:
                os.kill(pid, signal.SIGKILL)
                left += 1
    return left


def ours_summaries(results: Path, column: str = AGENT_RETURN) -> Summaries:
    """(agent steps, ``column``) of each progress.csv row of the run under ``results``."""

    def read() -> list[tuple[int, float]]:
        found = list(results.glob("*/progress.csv"))
        if not found:
            return []
        with found[0].open() as file:
            rows = [r for r in csv.DictReader(file) if r.get(column) and r.get(AGENT_STEPS)]
        return [(int(float(r[AGENT_STEPS])), float(r[column])) for r in rows]

    return read


def mlagents_summaries(log: Path, pattern: re.Pattern[str] = SUMMARY) -> Summaries:
    """(step, value) of each summary line of mlagents-learn's ``log`` that ``pattern`` matches."""

    def read() -> list[tuple[int, float]]:
        text = log.read_text(errors="replace") if log.exists() else ""
        return [(int(m.group(1)), float(m.group(2))) for m in pattern.finditer(text)]

    return read


def run(
    command: list[str], folder: Path, summaries: Summaries, target: float | None, cap: float
) -> dict[str, Any]:
    """Launch ``command`` (output to folder/log.txt), stop it at the first summary >= target or at ``cap``
    seconds; the seconds to that summary, its agent steps, and every summary seen.  With ``target``
    None, wait for the process to exit by itself (interrupted at ``cap``): "solved" is whether it did,
    with status 0, and the seconds, agent steps and reward are its exit's and its last summary's."""
    log = folder / "log.txt"
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=folder)
    reached: tuple[float, int, float] | None = None
    # what ran under it so far: an exit of its own leaves no parent to find its leftovers by afterwards
    tree: dict[int, str] = {}
    while reached is None and proc.poll() is None and time.perf_counter() - start < cap:
        if target is None:
            tree.update(descendants(proc.pid))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=POLL_S)
            continue
        time.sleep(POLL_S)
        hit = next(((s, r) for s, r in summaries() if r >= target), None)
        if hit:
            reached = (time.perf_counter() - start, *hit)
    if target is None and proc.returncode is not None:
        exit_s = time.perf_counter() - start  # by itself: timed to its exit, nothing signalled
        seen = summaries()
        if proc.returncode == 0 and seen:
            reached = (exit_s, *seen[-1])
        time.sleep(1.0)  # a game its trainer closed is given a moment to end
    else:
        tree.update(descendants(proc.pid))
        proc.send_signal(signal.SIGINT)  # both save their model and end their game
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        time.sleep(1.0)  # a game told to quit is given a moment to do so
        exit_s = time.perf_counter() - start
    leftovers = end_leftovers(list(tree.items()))
    seen = summaries()
    if reached is None:
        print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
    return {
        "wall": reached[0] if reached else exit_s, "solved": reached is not None,
        "steps": reached[1] if reached else (seen[-1][0] if seen else 0),
        "reward": reached[2] if reached else (seen[-1][1] if seen else float("nan")),
        "summaries": seen, "exit": exit_s, "leftovers": leftovers, "log": log.read_text(errors="replace"),
        "returncode": proc.returncode,
    }  # fmt: skip


def command(
    side: str, learn: Path, folder: Path, seed: int, game: str, config: Path | None = None
) -> list[str]:
    """The side's command line; ``config``: a copy of the game's file to train with instead."""
    config = config or GAMES[game][0]
    port = ["--base-port", str(6100 + 10 * (seed % 100))]
    common = ["--no-graphics", f"--run-id=r{seed}", f"--results-dir={folder / 'results'}", f"--seed={seed}"]
    if side == "ours":
        build = folder / "builds" / game
        return [sys.executable, str(ROOT / "train.py"), str(config), f"--env={build}", *common, *port]
    return [str(learn), str(config), f"--env={folder / 'builds' / f'{game}.x86_64'}", *common, *port]


def per_summary(summaries: list[tuple[int, float]]) -> str:
    """The agent steps between summaries: ``12000``, or ``12077-12093`` where they vary (ours samples
    whole scene steps, 12 agents each, and counts an agent's last step of an episode as its own)."""
    steps = [b[0] - a[0] for a, b in zip([(0, 0.0), *summaries], summaries, strict=False)]
    if not steps:
        return "-"
    return f"{min(steps)}" if min(steps) == max(steps) else f"{min(steps)}-{max(steps)}"


def report(runs: dict[str, list[dict[str, Any]]], target: float, game: str) -> list[str]:
    config, _, what, _ = GAMES[game]
    buffer = next(
        (ln.split()[-1] for ln in runs["mlagents"][0]["log"].splitlines() if "buffer_size:" in ln), "?"
    )
    lines = [
        "### mlagents_configs: mlagents-learn trainer configs on the stand-in games, train.py vs"
        f" mlagents-learn 1.1.0, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`."
        f" The same trainer config file, unchanged, on both sides ({what}); each side timed from launch to"
        f" its first summary whose mean reward per agent"
        f" reaches the target. Steps are agent steps.",
        "",
        f"**{config.name} on the stand-in {game}, train.py against mlagents-learn: seconds to {target:.2f}"
        " per agent**",
        "",
        "| seed (first) | ours: s | ours: agent steps | ours: reward | mlagents-learn: s"
        " | mlagents-learn: agent steps | mlagents-learn: reward | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(r: dict[str, Any]) -> str:
        return f"{r['wall']:.1f}" if r["solved"] else f"not reached ({r['wall']:.0f})"

    for ours, theirs in zip(runs["ours"], runs["mlagents"], strict=True):
        ratio = f"{ours['wall'] / theirs['wall']:.2f}" if ours["solved"] and theirs["solved"] else "-"
        lines.append(
            f"| {ours['seed']} ({ours['first']}) | {cell(ours)} | {ours['steps']} | {ours['reward']:.2f}"
            f" | {cell(theirs)} | {theirs['steps']} | {theirs['reward']:.2f} | {ratio} |"
        )
    median = {side: statistics.median(r["wall"] for r in rs) for side, rs in runs.items()}
    steps = {side: statistics.median(r["steps"] for r in rs) for side, rs in runs.items()}
    lines += [
        "",
        f"Median seconds to {target:.2f} per agent (a run that did not reach it counts with the time it ran):"
        f" ours {median['ours']:.1f}, mlagents-learn {median['mlagents']:.1f}; ratio ours/mlagents-learn ="
        f" {median['ours'] / median['mlagents']:.2f}. Median agent steps to it: ours {steps['ours']:.0f},"
        f" mlagents-learn {steps['mlagents']:.0f}. Agent steps per summary: ours"
        f" {per_summary(runs['ours'][0]['summaries'])}, mlagents-learn"
        f" {per_summary(runs['mlagents'][0]['summaries'])} (buffer_size {buffer} in its log).",
    ]
    left = sum(r["leftovers"] for rs in runs.values() for r in rs)
    if left:
        lines.append(f"{left} processes were still running after an interrupted side had exited (killed).")
    return lines


def steps_at_exit(side: str, folder: Path, seed: int, game: str, result: dict[str, Any]) -> int | None:
    """The side's agent steps when it ended: ours, its last progress.csv row's (the iteration that met the
    stop); mlagents-learn, its last checkpoint's, ``GAME-STEPS.pt`` (its trainer's step, past its last
    summary's)."""
    if side == "ours":
        return result["summaries"][-1][0] if result["summaries"] else None
    saved = (folder / "results" / f"r{seed}" / game).glob(f"{game}-*.pt")
    steps = [int(m.group(1)) for f in saved if (m := re.fullmatch(rf"{re.escape(game)}-(\d+)\.pt", f.name))]
    return max(steps, default=None)


def budget_report(runs: dict[str, list[dict[str, Any]]], game: str, config: Path, budget: int) -> list[str]:
    """The section of a fixed-budget game: seconds from launch to each side's own exit at ``budget``."""
    what = GAMES[game][2]
    lines = [
        "### mlagents_configs: mlagents-learn trainer configs on the stand-in games, train.py vs"
        f" mlagents-learn 1.1.0, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/{Path(__file__).name} {' '.join(sys.argv[1:])}`."
        f" The same trainer config file on both sides ({what}); a fixed budget of {budget} agent steps"
        " (max_steps, both teams together), each side timed from launch to its own exit. Rewards: the last"
        " summary's mean reward per agent (ours with the group reward in it, mlagents-learn's without).",
        "",
        f"**{config.name} on the stand-in {game}, train.py against mlagents-learn: seconds to {budget} agent"
        " steps, to the process's exit**",
        "",
        "| seed (first) | ours: s | ours: agent steps at exit | ours: last reward | mlagents-learn: s"
        " | mlagents-learn: agent steps at exit | mlagents-learn: last reward | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(r: dict[str, Any]) -> str:
        return (
            f"{r['wall']:.1f}"
            if r["solved"]
            else f"did not finish ({r['wall']:.0f}, status {r['returncode']})"
        )

    ratios = []
    for ours, theirs in zip(runs["ours"], runs["mlagents"], strict=True):
        both = ours["solved"] and theirs["solved"]
        if both:
            ratios.append(ours["wall"] / theirs["wall"])
        lines.append(
            f"| {ours['seed']} ({ours['first']}) | {cell(ours)} | {ours['steps']} | {ours['reward']:.3f}"
            f" | {cell(theirs)} | {theirs['steps']} | {theirs['reward']:.3f}"
            f" | {f'{ratios[-1]:.2f}' if both else '-'} |"
        )
    median = {side: statistics.median(r["wall"] for r in rs) for side, rs in runs.items()}
    ratio = (
        f"Median ratio ours/mlagents-learn over {len(ratios)} pairs: {statistics.median(ratios):.2f}."
        if ratios
        else "No pair where both sides finished: no ratio."
    )
    lines += [
        "",
        f"{ratio} Median seconds: ours {median['ours']:.1f}, mlagents-learn {median['mlagents']:.1f}."
        f" Summaries per run: ours {len(runs['ours'][0]['summaries'])}, mlagents-learn"
        f" {len(runs['mlagents'][0]['summaries'])}; agent steps per summary: ours"
        f" {per_summary(runs['ours'][0]['summaries'])}, mlagents-learn"
        f" {per_summary(runs['mlagents'][0]['summaries'])}.",
    ]
    warned = sum(MULTIPLE_TEAMS in r["log"] for r in runs["mlagents"])
    lines.append(
        f"mlagents-learn warned of multiple teams without self_play in {warned} of {len(runs['mlagents'])}"
        " runs (its first team plays its initial policy throughout; see the script's docstring)."
    )
    left = sum(r["leftovers"] for rs in runs.values() for r in rs)
    if left:
        lines.append(f"{left} processes were still running after a side had exited (killed).")
    return lines


def budget_config(game: str, max_steps: int | None, folder: Path) -> tuple[Path, int]:
    """The file both sides train with and its budget: the game's, or a copy of it with ``max_steps``."""
    config = GAMES[game][0]
    settings = yaml.safe_load(config.read_text())
    if max_steps is None:
        return config, int(float(next(iter(settings["behaviors"].values())).get("max_steps", 500_000)))
    for behavior in settings["behaviors"].values():
        behavior["max_steps"] = max_steps
    copy = folder / config.name
    copy.write_text(f"# {config.name} with max_steps {max_steps} (--max-steps)\n" + yaml.safe_dump(settings))
    return copy, max_steps


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--game", choices=list(GAMES), default="3DBall")
    p.add_argument("--target", type=float, help="mean reward per agent (default: the game's)")
    p.add_argument("--cap", type=float, default=240.0, help="seconds per run")
    p.add_argument("--mlagents-venv", type=Path, default=Path.home() / ".cache" / "envsdk" / "mlagents-1.1.0")
    p.add_argument("--keep", type=Path, help="copy each run's folder (log, results) here")
    p.add_argument(
        "--max-steps", type=int, help="a fixed-budget game's budget (default: its file's max_steps)"
    )
    p.add_argument("--no-append", action="store_true", help="print the section, leave RESULTS.md alone")
    args = p.parse_args()
    target = args.target if args.target is not None else GAMES[args.game][3]
    if GAMES[args.game][3] is None and args.target is not None:
        p.error(f"--target: {args.game} is a fixed budget (--max-steps)")
    if target is not None and args.max_steps is not None:
        p.error(f"--max-steps: {args.game} is timed to a target (--target)")
    learn = mlagents_venv(args.mlagents_venv)
    runs: dict[str, list[dict[str, Any]]] = {"ours": [], "mlagents": []}
    with tempfile.TemporaryDirectory() as tmp:
        config, budget = budget_config(
            args.game, args.max_steps, Path(tmp)
        )  # the game's file, unless --max-steps
        for pair in range(args.pairs):
            seed = 1 + pair
            sides = ("ours", "mlagents") if pair % 2 == 0 else ("mlagents", "ours")
            for side in sides:
                folder = Path(tmp) / f"{side}-{seed}"
                write_build(folder / "builds", args.game, GAMES[args.game][1])
                print(f"{side} seed {seed} ...", end=" ", flush=True)
                found = (
                    ours_summaries(folder / "results" / f"r{seed}")
                    if side == "ours"
                    else mlagents_summaries(folder / "log.txt")
                )
                result = run(
                    command(side, learn, folder, seed, args.game, config), folder, found, target, args.cap
                )
                if target is None:
                    result["steps"] = steps_at_exit(side, folder, seed, args.game, result)
                runs[side].append({**result, "seed": seed, "first": sides[0]})
                if target is None:
                    state = (
                        "finished" if result["solved"] else f"did NOT finish (status {result['returncode']})"
                    )
                else:
                    state = "reached" if result["solved"] else "NOT reached"
                print(
                    f"{state} in {result['wall']:.1f} s, {result['steps']} agent steps"
                    f" ({result['reward']:.2f}); exited at {result['exit']:.1f} s"
                    + (f", {result['leftovers']} processes left (killed)" if result["leftovers"] else ""),
                    flush=True,
                )
                if args.keep:
                    shutil.copytree(folder, args.keep / folder.name, dirs_exist_ok=True)
    lines = (
        report(runs, target, args.game)
        if target is not None
        else budget_report(runs, args.game, config, budget)
    )
    if args.no_append:
        print("\n".join(lines))
    else:
        append_results(lines)


if __name__ == "__main__":
    main()
