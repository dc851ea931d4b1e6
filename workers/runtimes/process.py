"""Instances as local process groups: the embedded default on machines without Docker.

The image is ignored: the engine command runs with the vLLM virtualenv first on PATH, in an
environment of its plan's env and a few harmless basics of the worker's (INHERITED_ENV). Each
instance leaves a state file (pid, start time, port, the staged folders it reads) so a
restarted worker finds the processes it started; the start time guards against a recycled pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from contracts import engine_front as front
from contracts import engine_tls
from contracts.engines import prepare
from contracts.engines.plan import ContainerPlan, Placement
from contracts.serving_tls import ServingTls
from workers.runtimes import process_groups
from workers.runtimes.base import (
    InstanceError,
    InstanceRequest,
    ObservedInstance,
    Report,
    owned_by,
)

STOP_TIMEOUT = 15.0
ROOT = Path(__file__).resolve().parents[2]  # where `python -m gateway.front` finds it
POD = Path(__file__).with_name("process_pod.py")  # an instance's containers as one group

# What an engine process inherits from the worker's environment, and why. Nothing else: the
# worker holds the control plane's secrets (DATABASE_URL, REDIS_URL, WHARF_SECRET_KEY, the
# bootstrap token, object-storage credentials) and an engine may be a user's own command.
# Everything an engine needs beyond these basics comes from its plan's env.
INHERITED_ENV = frozenset(
    {
        "PATH",  # where programs are found; the engine virtualenv is put in front of it
        "HOME",  # vLLM's and torch's caches and config live under ~/.cache, ~/.config
        "XDG_CACHE_HOME",  # where those caches go instead, on a node that moves them off HOME
        "USER",  # getpass.getuser(), which torch names its compile-cache folder after, reads
        "LOGNAME",  # these two first (and fails without them for a uid missing from passwd)
        "LANG",  # the text encoding of the engine's output and of the files it reads
        "TZ",  # the time zone of the engine's log timestamps
        "TMPDIR",  # where temporary files go (vLLM's IPC sockets, torch's compile scratch)
    }
)
INHERITED_PREFIXES = ("LC_",)  # the locale's categories (LC_ALL, LC_CTYPE, ...), as LANG


LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def inherited_env(worker_env: Mapping[str, str]) -> dict[str, str]:
    """The part of the worker's environment an engine may see: INHERITED_ENV's basics."""
    return {
        name: value
        for name, value in worker_env.items()
        if name in INHERITED_ENV or name.startswith(INHERITED_PREFIXES)
    }


# What a front is given and its engine never sees (gateway.front strips them too).
FRONT_ONLY = (front.KEY_ENV, front.METRICS_TOKEN_ENV, engine_tls.CERT_ENV, engine_tls.KEY_ENV)


def engine_environment(environ: bytes) -> dict[str, str]:
    """An engine's environment from its process's (a front's: with its secrets, which the
    engine it starts never gets)."""
    env = {}
    for entry in environ.split(b"\0"):
        name, equals, value = entry.decode(errors="replace").partition("=")
        if equals and name not in FRONT_ONLY:
            env[name] = value
    return env


def exec_probe(command: tuple[str, ...], env: dict[str, str], cwd: Path, timeout: float) -> bool:
    """Whether `command` exits 0 within `timeout` seconds; its group is killed after that."""
    try:
        proc = subprocess.Popen(
            command, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip
    except OSError:  # no such program
        return False
    try:
        return proc.wait(timeout) == 0
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return False


def _proc_start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat, or None if the process is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


class ProcessRuntime:
    name = "process"

    def __init__(
        self,
        model_dir: str,
        state_dir: Path,
        venv: Path | None = None,
        node_address: str = "127.0.0.1",
        node: str = "",
        metrics_token: str = "",
        tls: ServingTls | None = None,
    ):
        self.node = node  # lists only this node's instances (nodes may share a state dir)
        self.metrics_token = metrics_token
        # The node's certificate for its fronts (contracts.engine_tls): https:// instances.
        self.tls = tls
        self.model_dir = model_dir.rstrip("/")
        self.state_dir = Path(state_dir)
        self.venv = venv
        # Engines listen on the node's address only (the one gateways reach them at), never
        # on every interface: with the default, only this host can call them.
        self.node_address = node_address
        # The engines this process started, by pid. Held so that their exit codes stay ours to
        # read: subprocess reaps the children of Popen objects dropped while still running
        # whenever any later Popen starts (device discovery, the next engine), which left
        # waitpid nothing to report and every exit without its code.
        self._children: dict[int, subprocess.Popen] = {}

    def placement(self) -> Placement:
        """An engine listens on this host's loopback, behind its front (gateway.front) on the
        node's address; a prefill/decode member is placed on the node's address instead
        (workers.nodes.starter.pd_placement): its peers call it."""
        return Placement(in_container=False, model_store=self.model_dir, host=LOOPBACK,
                         port=free_port(LOOPBACK))  # fmt: skip

    def prepare(
        self, plan: ContainerPlan, docker_auth: str | None, report: Report, tenant: bool = False
    ) -> None:
        pass  # the image is ignored: nothing to pull

    def _state_path(self, name: str) -> Path:
        return self.state_dir / f"{name}.json"

    def _log_path(self, name: str) -> Path:
        return self.state_dir / f"{name}.log"

    def _env(self, plan: ContainerPlan) -> dict[str, str]:
        env = inherited_env(os.environ)
        if plan.gpus:  # a process cannot get device requests; CUDA honours this instead
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in plan.gpus)
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # so the indexes mean nvidia-smi's
        if self.venv:
            env["PATH"] = f"{self.venv}/bin:{env.get('PATH', '')}"
            env["VIRTUAL_ENV"] = str(self.venv)
        return {**env, **plan.env}

    def create(self, request: InstanceRequest) -> ObservedInstance:
        plan = request.plan
        if plan.mounts:
            targets = ", ".join(m.target for m in plan.mounts)
            raise InstanceError(
                f"storage mounts ({targets}) need the docker runtime; local processes see host "
                "paths only (give llm.model as a model-store name or an object-storage URI)"
            )
        if plan.files:
            raise InstanceError(
                f"generated files ({', '.join(plan.files)}) need the docker runtime"
            )
        beside = {sidecar.port for sidecar in plan.sidecars}  # on the node's loopback too
        if others := sorted({asked for asked, reached in request.probe_ports
                             if reached != plan.port and asked not in beside}):  # fmt: skip
            raise InstanceError(
                f"probes of port {', '.join(map(str, others))}: a local process has no network "
                "of its own, so only its serving port is probed; use the docker runtime"
            )
        if self.venv and not (self.venv / "bin" / "python").exists():
            raise InstanceError(f"no engine virtualenv at {self.venv}; run `make engines`")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # Its sidecars: processes of the instance's group, beside the main one (process_pod).
        engine = self._pod(request.name, plan) if plan.sidecars else plan.args
        args, env, url = engine, self._env(plan), f"http://{self.node_address}:{plan.port}"
        # The node's Python is every local instance's: a container's prepare installs into a
        # folder of this instance's own (contracts.engines.prepare).
        if prepare.installs(plan):
            env[prepare.TARGET_ENV] = str(self._python_dir(request.name))
        health_path, fronted = plan.health_path, self._fronted(request)
        if fronted:
            port = free_port(self.node_address)
            args = [sys.executable, "-m", "gateway.front", "--cwd", str(self.state_dir),
                    "--listen", f"{self.node_address}:{port}",
                    "--upstream", f"{LOOPBACK}:{plan.port}"]  # fmt: skip
            if plan.metrics_path:
                args += ["--metrics-path", "/" + plan.metrics_path.lstrip("/")]
            for asked, reached in request.probe_ports:
                args += ["--probe-port", f"{asked}={reached}"]
            args += ["--", *engine]
            env[front.KEY_ENV] = request.engine_key
            if self.metrics_token:
                env[front.METRICS_TOKEN_ENV] = self.metrics_token
            if self.tls:
                env[engine_tls.CERT_ENV] = str(self.tls.cert)
                env[engine_tls.KEY_ENV] = str(self.tls.key)
            url = engine_tls.instance_url(self.node_address, port, tls=bool(self.tls))
            health_path = health_path or front.READY_PATH
        with open(self._log_path(request.name), "ab") as log:
            try:
                proc = subprocess.Popen(
                    args, env=env, stdout=log, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                    cwd=ROOT if fronted else self.state_dir,
                )  # fmt: skip
            except OSError as exc:
                raise InstanceError(f"cannot start {plan.args[0]}: {exc}") from exc
        self._children[proc.pid] = proc
        state = {
            "service": request.service,
            "name": request.name,
            "spec_hash": request.spec_hash,
            "pid": proc.pid,
            "start_time": _proc_start_time(proc.pid),
            "url": url,
            "health_path": health_path,
            "devices": request.devices,
            "role": request.role,
            "pd_index": request.pd_index,
            "paths": list(request.paths),
            "node": self.node,
            "fronted": fronted,
        }
        tmp = self._state_path(request.name).with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        tmp.replace(self._state_path(request.name))
        return self._observe(state)

    def _pod(self, name: str, plan: ContainerPlan) -> list[str]:
        """The main command under process_pod, which starts the sidecars beside it, each with
        the worker's basics and its own env (written to a file of the instance's, 0600)."""
        sidecars = []
        for sidecar in plan.sidecars:
            if not sidecar.args:
                raise InstanceError(f"containers[{sidecar.index}] has no command: a local "
                                    "process has no image entrypoint to run")  # fmt: skip
            env = self._env(replace(plan, env=sidecar.env, gpus=()))
            sidecars.append({"index": sidecar.index, "args": sidecar.args, "env": env})
        path = self._sidecars_path(name)
        path.touch(mode=0o600)
        path.write_text(json.dumps(sidecars))
        return [sys.executable, "-I", str(POD), "--sidecars", str(path), "--", *plan.args]

    def _sidecars_path(self, name: str) -> Path:
        return self.state_dir / f"{name}.sidecars"  # not .json: list() reads those

    def _fronted(self, request: InstanceRequest) -> bool:
        """Whether the engine gets a front: every one with a key, but a prefill/decode member,
        which listens on the node's address for its peers (workers.nodes.starter.pd_placement)."""
        return bool(request.engine_key) and not request.role

    def _observe(self, state: dict) -> ObservedInstance:
        alive = (
            state["start_time"] is not None
            and _proc_start_time(state["pid"]) == state["start_time"]
        )
        exit_code = None
        child = self._children.get(state["pid"])
        if not alive and child is not None:
            exit_code = child.poll()  # reaps it (a signal: minus its number)
        elif not alive:
            try:  # a child of an earlier Popen here: reap it and learn how it ended
                _, status = os.waitpid(state["pid"], os.WNOHANG)
                exit_code = os.waitstatus_to_exitcode(status) if status else None
            except ChildProcessError:
                pass
        # A state file from before paths were recorded: unknown (the cache prune then waits).
        paths = tuple(state["paths"]) if "paths" in state else None
        return ObservedInstance(
            service=state["service"],
            name=state["name"],
            spec_hash=state["spec_hash"],
            running=alive,
            url=state["url"],
            health_path=state.get("health_path", ""),
            exit_code=exit_code,
            devices=state.get("devices", ""),
            role=state.get("role", ""),
            pd_index=state.get("pd_index", 0),
            paths=paths,
            fronted=state.get("fronted", False),
        )

    def read_file(self, name: str, path: str, limit: int) -> bytes:
        """A local process sees the node's own files: `path` read as it is."""
        with open(path, "rb") as found:
            return found.read(limit)

    def terminate(self, name: str) -> None:
        """SIGTERM to its process group: the front stops taking connections and waits for
        the engine, which ends in its own time."""
        try:
            state = json.loads(self._state_path(name).read_text())
        except (OSError, ValueError):
            return
        if _proc_start_time(state["pid"]) == state["start_time"]:
            process_groups.signal_group(state["pid"], signal.SIGTERM)

    def cpu_seconds(self, name: str) -> float | None:
        """CPU seconds its process group has used (the front's and the engine's); None when
        it is not running."""
        try:
            state = json.loads(self._state_path(name).read_text())
        except (OSError, ValueError):
            return None
        if _proc_start_time(state["pid"]) != state["start_time"]:
            return None
        return process_groups.group_cpu_seconds(state["pid"])

    def list(self, service: str | None = None) -> list[ObservedInstance]:
        try:  # unlike glob(), iterdir() raises when the folder cannot be read
            paths = sorted(p for p in self.state_dir.iterdir() if p.name.endswith(".json"))
        except FileNotFoundError:  # nothing was ever started here
            return []
        observed = []
        for path in paths:
            try:
                state = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if not owned_by(self.node, state.get("node")):
                continue
            if service is None or state["service"] == service:
                observed.append(self._observe(state))
        return observed

    def remove(self, name: str) -> None:
        path = self._state_path(name)
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        if _proc_start_time(state["pid"]) == state["start_time"]:
            self._stop_group(state["pid"])
        child = self._children.pop(state["pid"], None)
        if child is not None:
            child.poll()  # reaped (by now, or by _stop_group): nothing left for subprocess
        path.unlink(missing_ok=True)
        self._log_path(name).unlink(missing_ok=True)
        self._sidecars_path(name).unlink(missing_ok=True)
        shutil.rmtree(self._python_dir(name), ignore_errors=True)

    def _python_dir(self, name: str) -> Path:
        """Where instance `name`'s Python requirements are installed (containers[].prepare)."""
        return self.state_dir / "python" / name

    @staticmethod
    def _stop_group(pid: int) -> None:
        """SIGTERM the whole group (an engine's own children, such as vLLM's engine core and,
        in its multiprocess layout, the worker, are in it), SIGKILL if slow."""

        def reap() -> None:  # the engine, where this worker started it
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)

        process_groups.stop_groups([pid], STOP_TIMEOUT, reap=reap)

    def forget(self, service: str) -> None:
        """Remove what a deleted service shared between its instances (the KV folder)."""
        shutil.rmtree(self.state_dir.parent / "kv" / service, ignore_errors=True)

    def exec_check(self, name: str, command: tuple[str, ...], timeout: float) -> bool:
        """`command` run as the engine runs: in its working directory, with its environment
        (read from its process: the plan's, less its front's secrets), under this worker's
        account (the engine's); past `timeout` its whole group is killed."""
        try:
            state = json.loads(self._state_path(name).read_text())
            environ = Path(f"/proc/{state['pid']}/environ").read_bytes()
        except (OSError, ValueError, KeyError):
            return False
        if _proc_start_time(state["pid"]) != state["start_time"]:
            return False  # a recycled pid: not the engine's environment
        return exec_probe(command, engine_environment(environ), self.state_dir, timeout)

    def logs(self, name: str, tail: int = 200) -> str:
        try:
            lines = self._log_path(name).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-tail:])
