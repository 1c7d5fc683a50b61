"""Joining a cluster: an address where nothing answers is refused in seconds, in one line.

Ray 2.60 retries its connection to a head that is not there for minutes, printing only its own
GCS warnings; ``start_ray`` asks the address first."""

from __future__ import annotations

import socket
import time

import pytest

from envsdk.cluster.ray_session import unanswered
from tests.helpers import free_port, run_train


@pytest.mark.parametrize("form", ["{host}:{port}", "ray://{host}:{port}"])
def test_a_listening_port_answers_and_a_closed_one_is_named(form):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        assert unanswered(form.format(host="127.0.0.1", port=port)) is None
    closed = free_port()
    reason = unanswered(form.format(host="127.0.0.1", port=closed))
    assert reason is not None and f"nothing answers at 127.0.0.1:{closed}" in reason


@pytest.mark.parametrize("address", ["localhost", "head-node:", "head:port"])
def test_an_address_of_another_form_is_left_to_ray(address):
    assert unanswered(address) is None


def test_train_py_refuses_a_dead_address_in_seconds_with_one_line(tmp_path):
    (tmp_path / "exp.yaml").write_text(
        "remote:\n  run: PPO\n  env: CartPole-v1\n  stop: {training_iteration: 1}\n"
        "  config: {num_env_runners: 1}\n"  # a remote env runner: the run must join the cluster
    )
    port = free_port()
    started = time.monotonic()
    out = run_train(["-f", "exp.yaml", "--ray-address", f"127.0.0.1:{port}"], cwd=tmp_path, timeout=120)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    errors = [line for line in out.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"nothing answers at 127.0.0.1:{port}" in errors[0], out.stderr[-2000:]
    assert "--ray-address" in out.stderr and "Traceback" not in out.stderr
    assert time.monotonic() - started < 60  # Ray's own retries took minutes
