"""How long the Docker runtime takes to stop an instance whose engine has no SIGTERM handler of
its own, with Docker's init in the container (as Wharf runs it) and without (its engine is
PID 1, which the kernel spares a signal it has no handler for).

The engine is a custom container, `exec python3 -m http.server`, in the engine image every
Docker node has (wharf/vllm-cpu). Each round renders and creates the instance as a worker does
(contracts.engines.render, DockerRuntime.create), waits until it answers, then times
DockerRuntime.remove (the stop of a drain, scale-down or delete) and reads the exit code from
the container's die event: 143 is SIGTERM, 137 the SIGKILL at the end of the 10 s grace.

    .venv/bin/python benchmarks/instance_stop.py              # about 1 minute
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import Processes, wait_http  # noqa: E402
from contracts.engines import render  # noqa: E402
from contracts.spec import parse_spec  # noqa: E402
from workers.runtimes import docker as docker_runtime  # noqa: E402
from workers.runtimes.base import InstanceRequest  # noqa: E402

IMAGE = "wharf/vllm-cpu:0.32.0"
WHARFS = docker_runtime.run_options


def without_init(*args, **kwargs) -> dict:
    """Wharf's options for the container, less Docker's init."""
    return {**WHARFS(*args, **kwargs), "init": False}


def one_stop(runtime: docker_runtime.DockerRuntime, init: bool) -> tuple[float, str]:
    """(seconds DockerRuntime.remove took, the engine's exit code)."""
    name = f"stop-bench-{uuid.uuid4().hex[:6]}"
    engine = {"image": IMAGE, "port": 8000, "command": "exec python3 -m http.server 8000"}
    data = {"name": name, "containers": [engine]}
    plan = render(parse_spec(data), runtime.placement())
    instance = f"{name}-1"
    with mock.patch.object(docker_runtime, "run_options", WHARFS if init else without_init):
        runtime.create(InstanceRequest(name, instance, "h", plan))
    try:
        container = runtime.client.containers.get(instance)
        container.reload()
        port = container.attrs["NetworkSettings"]["Ports"]["8000/tcp"][0]["HostPort"]
        wait_http(f"http://127.0.0.1:{port}/", Processes(), timeout=30)  # it serves its folder
        since = int(time.time())
        started = time.monotonic()
        runtime.remove(instance)
        took = time.monotonic() - started
    finally:
        runtime.remove(instance)
    died = runtime.client.events(since=since, until=int(time.time()) + 1, decode=True,
                                 filters={"container": container.id, "event": "die"})  # fmt: skip
    codes = [event["Actor"]["Attributes"].get("exitCode", "?") for event in died]
    return took, ",".join(codes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="stops of each kind (2)")
    args = parser.parse_args()
    runtime = docker_runtime.DockerRuntime(model_dir="/nonexistent")
    runtime.client.images.get(IMAGE)  # ImageNotFound: `make engines` first
    print("| container | stop s | exit code |\n|---|---|---|")
    for _ in range(args.rounds):
        for label, init in (("wharf (Docker's init)", True), ("engine as PID 1", False)):
            took, code = one_stop(runtime, init)
            print(f"| {label} | {took:.2f} | {code} |", flush=True)


if __name__ == "__main__":
    main()
