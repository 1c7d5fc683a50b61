"""The gRPC side of the bridge: we serve, the Unity player calls ``Exchange``.

One round of the protocol is one unary call: the player sends its output
(observations, rewards) and waits for our reply (actions, command).  The
servicer therefore parks each incoming call until :meth:`Communicator.exchange`
has the reply for it.  The server listens on 127.0.0.1 only.
"""

from __future__ import annotations

import queue
import socket
import time
from collections.abc import Callable
from concurrent import futures

import grpc

from unity_bridge.errors import PlayerClosed, PlayerTimeout, VersionMismatch
from unity_bridge.protocol import communicator_objects_pb2 as pb
from unity_bridge.protocol import communicator_objects_pb2_grpc as pb_grpc

API_VERSION = "1.5.0"
PACKAGE_VERSION = "envsdk-unity-bridge"
HOST = "127.0.0.1"
EDITOR_PORT = 5004
OK, SHUTDOWN = 200, 400
_POLL_S = 0.25


def compatible(ours: str, theirs: str) -> bool:
    """The protocol's rule: majors match, and minors too while the major is 0."""
    try:
        our = [int(p) for p in ours.split(".")[:2]]
        their = [int(p) for p in theirs.split(".")[:2]]
    except ValueError:
        return False
    if their[0] == 0 or our[0] == 0:
        return our == their
    return our[0] == their[0]


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:port can be listened on right now.

    With SO_REUSEADDR, as gRPC binds: connections of an earlier server on the
    port that linger in TIME_WAIT do not make it taken; a listener does.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((HOST, port))
        except OSError:
            return False
    return True


class _Servicer(pb_grpc.UnityToExternalProtoServicer):
    def __init__(self) -> None:
        self.inbox: queue.SimpleQueue[pb.UnityMessageProto] = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue[pb.UnityMessageProto] = queue.SimpleQueue()

    def Exchange(self, request: pb.UnityMessageProto, context: grpc.ServicerContext) -> pb.UnityMessageProto:
        self.inbox.put(request)
        return self.outbox.get()


class Communicator:
    """gRPC server for one player on ``port``; :meth:`bind` it before launching the player."""

    def __init__(self, port: int):
        self.port = port
        self._servicer = _Servicer()
        # so_reuseport off: a second server must not silently share a port in use (ray #13412).
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=2),
            options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 512 * 1024 * 1024)],
        )
        pb_grpc.add_UnityToExternalProtoServicer_to_server(self._servicer, self._server)
        self._pending = False
        self._closed = False

    def bind(self) -> bool:
        """Listen on 127.0.0.1:port; False if the port is taken."""
        if not port_free(self.port):
            return False
        try:
            bound = self._server.add_insecure_port(f"{HOST}:{self.port}")
        except RuntimeError:
            return False
        if bound != self.port:
            return False
        self._server.start()
        return True

    def _receive(self, timeout: float, alive: Callable[[], bool]) -> pb.UnityMessageProto:
        deadline = time.monotonic() + timeout
        while True:
            try:
                message = self._servicer.inbox.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not alive():
                    raise PlayerClosed("the player exited") from None
                if time.monotonic() > deadline:
                    raise PlayerTimeout(f"no message from the player in {timeout:g} s") from None
        self._pending = True
        if message.header.status != OK:
            raise PlayerClosed(f"the player is shutting down (status {message.header.status})")
        return message

    def _reply(self, message: pb.UnityMessageProto) -> None:
        self._pending = False
        self._servicer.outbox.put(message)

    def handshake(
        self, *, seed: int, num_areas: int, timeout: float, alive: Callable[[], bool]
    ) -> pb.UnityRLInitializationOutputProto:
        """Answer the player's first call and park its second; returns what it announced."""
        first = self._receive(timeout, alive)
        init = first.unity_output.rl_initialization_output
        if not compatible(API_VERSION, init.communication_version):
            raise VersionMismatch(
                f"the player speaks ML-Agents API {init.communication_version or '(none)'}"
                f" (package {init.package_version or '?'}); the bridge speaks {API_VERSION}"
            )
        reply = pb.UnityMessageProto()
        reply.header.status = OK
        out = reply.unity_input.rl_initialization_input
        out.seed = seed
        out.num_areas = num_areas
        out.communication_version = API_VERSION
        out.package_version = PACKAGE_VERSION
        for field in pb.UnityRLCapabilitiesProto.DESCRIPTOR.fields:
            setattr(out.capabilities, field.name, True)
        self._reply(reply)
        self._receive(timeout, alive)  # the empty output that waits for the first command
        return init

    def exchange(
        self, rl_input: pb.UnityRLInputProto, *, timeout: float, alive: Callable[[], bool]
    ) -> pb.UnityOutputProto:
        """Answer the parked call with ``rl_input`` and wait for the player's next output."""
        reply = pb.UnityMessageProto()
        reply.header.status = OK
        reply.unity_input.rl_input.CopyFrom(rl_input)
        self._reply(reply)
        return self._receive(timeout, alive).unity_output

    def close(self) -> None:
        """Tell a waiting player to quit (status 400) and stop serving."""
        if self._closed:
            return
        self._closed = True
        if self._pending:
            bye = pb.UnityMessageProto()
            bye.header.status = SHUTDOWN
            self._reply(bye)
        else:
            self._servicer.outbox.put(pb.UnityMessageProto(header=pb.HeaderProto(status=SHUTDOWN)))
        self._server.stop(grace=0.5).wait(2)
