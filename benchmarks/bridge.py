"""Exchanges per second through the Unity bridge against the same game stepped in-process.

For 1 and 16 agents, vector and 84x84 visual (PNG) observations: the stand-in
game stepped in this process (game logic + observations, frames drawn in a
real X window on Xvfb), then the same game as a player process driven through
UnityEnvironment (gRPC over loopback, protobuf, PNG decode).  The overhead per
exchange is the difference of the two times per round; the CPU time this
process spent per exchange is our side's share of it (the rest is the
player's).  The floor: an empty message served by a Python gRPC server whose
handler hands it to the main thread and back (as the bridge must), called
in a loop by a Python client process.  Writes a table into
benchmarks/RESULTS.md and benchmarks/bridge.png.

    python benchmarks/bridge.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import datetime
import os
import queue
import subprocess
import sys
import time
from concurrent import futures
from pathlib import Path

import grpc
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, machine

from unity_bridge.communicator import port_free
from unity_bridge.display import VirtualDisplay
from unity_bridge.environment import Action, UnityEnvironment
from unity_bridge.protocol import communicator_objects_pb2 as pb
from unity_bridge.protocol import communicator_objects_pb2_grpc as pb_grpc
from unity_bridge.settings import LaunchSettings
from unity_bridge.standin.build import write_build
from unity_bridge.standin.game import make_game
from unity_bridge.standin.player import Camera, Log

TARGET_MS = 0.2
CASES = [(1, 0), (16, 0), (1, 84), (16, 84)]  # (agents, camera side; 0 = vector only)


def _timed(step, seconds: float) -> tuple[float, float]:
    """Wall seconds and this process's CPU seconds per call of ``step``, after a warm-up."""
    for _ in range(50):
        step()
    n, start, cpu = 0, time.perf_counter(), time.process_time()
    while time.perf_counter() - start < seconds:
        step()
        n += 1
    return (time.perf_counter() - start) / n, (time.process_time() - cpu) / n


class _Echo(pb_grpc.UnityToExternalProtoServicer):
    """Hands each request to the main thread and returns what comes back."""

    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()

    def Exchange(self, request, context):
        reply: queue.SimpleQueue = queue.SimpleQueue()
        self.inbox.put((request, reply))
        return reply.get()


def echo_client(port: int) -> None:
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    call = channel.unary_unary(
        "/communicator_objects.UnityToExternalProto/Exchange",
        request_serializer=pb.UnityMessageProto.SerializeToString,
        response_deserializer=pb.UnityMessageProto.FromString,
    )
    message = pb.UnityMessageProto(header=pb.HeaderProto(status=200))
    while True:
        call(message)


def grpc_floor(seconds: float) -> tuple[float, float]:
    """Wall and server-process CPU per round trip of an empty message (see module docstring)."""
    port = next(p for p in range(7300, 7400) if port_free(p))
    echo = _Echo()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_UnityToExternalProtoServicer_to_server(echo, server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    client = subprocess.Popen([sys.executable, __file__, "--echo-client", str(port)])

    def step() -> None:
        request, reply = echo.inbox.get()
        reply.put(request)

    try:
        return _timed(step, seconds)
    finally:
        client.kill()
        client.wait()
        server.stop(0)


def in_process(agents: int, side: int, seconds: float) -> float:
    game = make_game("chase", agents=agents, seed=0, decision_period=1, max_steps=30, actions="discrete")
    camera = Camera(side, 1, graphics=True, log=Log(None)) if side else None
    game.reset()
    actions = {a.slot: (np.zeros(0, np.float32), np.array([2])) for a in game.agents}

    def step() -> None:
        game.step(actions)
        for report in game.reports():
            if camera is not None:
                camera.frame(game.scene(report.agent))
        game.after_report()

    try:
        return _timed(step, seconds)[0]
    finally:
        if camera is not None:
            camera.close()


def through_bridge(agents: int, side: int, seconds: float, build: Path) -> tuple[float, float]:
    args = ["--agents", str(agents), "--max-steps", "30"] + (
        ["--visual", str(side), "--no-vector"] if side else []
    )
    settings = LaunchSettings.from_config(
        {"file_name": str(build), "no_graphics": not side, "virtual_display": "off", "additional_args": args}
    )
    game = UnityEnvironment(settings, worker_id=7)
    try:
        steps = game.wait_for_agents(game.reset())

        def step() -> None:
            nonlocal steps
            game.set_actions("Chase", {s.agent_id: Action(discrete=[2]) for s in steps if not s.done})
            steps = game.step()

        return _timed(step, seconds)
    finally:
        game.close()


def plot(rows: list[dict], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["label"].replace(", ", "\n") for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(x - 0.2, [1 / r["inproc"] for r in rows], 0.4, label="in-process")
    ax.bar(x + 0.2, [1 / r["bridge"] for r in rows], 0.4, label="through the bridge")
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    ax.set_ylabel("exchanges per second")
    ax.set_title("Unity bridge: stand-in game, one exchange = one step of every agent")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=3.0, help="measuring time per case and side")
    p.add_argument("--echo-client", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.echo_client:
        echo_client(args.echo_client)
        return
    build = write_build(ROOT / "builds", "Chase", ["--game", "chase"])
    display = VirtualDisplay(84, 84)  # both sides draw their frames on the same kind of X server
    os.environ["DISPLAY"] = display.name
    rows = []
    try:
        for agents, side in CASES:
            label = f"{agents} agent{'s' if agents > 1 else ''}, {'84x84 visual' if side else 'vector'}"
            inproc = in_process(agents, side, args.seconds)
            bridge, ours = through_bridge(agents, side, args.seconds, build)
            rows.append({"label": label, "inproc": inproc, "bridge": bridge, "ours": ours})
            print(f"{label}: in-process {1 / inproc:,.0f}/s, bridge {1 / bridge:,.0f}/s, "
                  f"overhead {(bridge - inproc) * 1e3:.3f} ms per exchange")  # fmt: skip
    finally:
        display.stop()
    floor, floor_cpu = grpc_floor(args.seconds)
    lines = [
        f"### bridge: Unity bridge exchanges per second, {datetime.date.today()}",
        f"Machine: {machine()}. `python benchmarks/bridge.py --seconds {args.seconds:g}`. "
        "In-process: the stand-in game stepped in this process (frames drawn on Xvfb). "
        "Bridge: the same game as "
        "a player process through UnityEnvironment (gRPC on 127.0.0.1, protobuf, PNG for frames). "
        f"Target: overhead under {TARGET_MS} ms per exchange for one agent with vector observations.",
        "",
        "| case | in-process (exchanges/s) | bridge (exchanges/s) | overhead per exchange (ms) "
        "| bridge-side CPU per exchange (ms) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['label']} | {1 / r['inproc']:,.0f} | {1 / r['bridge']:,.0f} "
            f"| {(r['bridge'] - r['inproc']) * 1e3:.3f} | {r['ours'] * 1e3:.3f} |"
        )
    ours = rows[0]["ours"] - floor_cpu
    lines.append(
        f"\nFloor (no game, no bridge code): an empty message served by Python gRPC with the same hand-off "
        f"to "
        f"the main thread, called by a Python client process, takes {floor * 1e3:.3f} ms per round trip and "
        f"{floor_cpu * 1e3:.3f} ms of server CPU. So for one agent with vector observations the bridge's own "
        f"code costs {ours * 1e3:.3f} ms of CPU per exchange above that floor; the rest of the overhead is "
        "gRPC in Python and the stand-in player's own (Python) work. Plot: benchmarks/bridge.png"
    )
    append_results(lines)
    plot(rows, ROOT / "benchmarks" / "bridge.png")


if __name__ == "__main__":
    main()
