"""`manage.py up` (the README's `make run`): the whole system on embedded defaults, plus a demo.

Steps, each printed as it starts: database, admin token, tiny model, engine (a Docker image or
a local virtualenv), the processes (controlplane.stack), the demo service, and the call info.
Ctrl-C stops the processes and the instances they ran; the database keeps the services, so
the next `up` brings them back.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import httpx
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from contracts.env import envstr
from controlplane.services.tiny_model import write_tiny_model
from controlplane.stack import ROOT, Stack
from controlplane.tokens.models import ApiToken, digest

DEMO_SPEC = ROOT / "deploy_specs" / "demo-tiny-vllm.json"
ENGINE_DIR = ROOT / "engine_images" / "vllm-cpu"


class Command(BaseCommand):
    help = "Bring up API, console, gateway and worker on embedded defaults and deploy a demo."

    def add_arguments(self, parser):
        parser.add_argument("--api-port", type=int, default=8000)
        parser.add_argument("--gateway-port", type=int, default=9000)
        parser.add_argument("--no-demo", action="store_true")

    def step(self, message: str) -> None:
        self.stdout.write(self.style.MIGRATE_HEADING(f"==> {message}"))

    def handle(self, *args, api_port: int, gateway_port: int, no_demo: bool, **_):
        self.step("database")
        call_command("migrate", interactive=False, verbosity=0)
        api_token = self.admin_token()
        runtime = self.prepare_engine()
        stack = Stack(home=settings.WHARF_HOME, env=self.child_env(runtime),
                      api_port=api_port, gateway_port=gateway_port)  # fmt: skip
        self.step("redis: " + stack.start_redis().split("?")[0])
        self.step(f"starting API, gateway and worker (logs in {settings.WHARF_HOME}/logs)")
        stack.start()
        try:
            token = None if no_demo else self.deploy_demo(stack, api_token)
            self.summary(stack, api_token, token)
            self.wait_for_signal()
        finally:
            self.step("stopping")
            stack.stop()
            self.remove_instances()
            self.stdout.write("stopped; `make run` brings the services back")

    def admin_token(self) -> str:
        self.step("admin API token")
        user_model = get_user_model()
        admin, _ = user_model.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        self.console_password = ""
        if not admin.has_usable_password():
            # Shown once, like every secret; `manage.py changepassword admin` resets it.
            self.console_password = envstr("WHARF_ADMIN_PASSWORD") or secrets.token_urlsafe(12)
            admin.set_password(self.console_password)
            admin.save()
        token = envstr("WHARF_BOOTSTRAP_TOKEN")
        if token:
            if not ApiToken.objects.filter(digest=digest(token)).exists():
                ApiToken.issue(admin, "bootstrap", token)
            return token
        # Tokens are shown once; a new run issues a fresh one and retires the last one.
        ApiToken.objects.filter(user=admin, name="make-run").delete()
        return ApiToken.issue(admin, "make-run")

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
        else:
            self.step(f"engine virtualenv {settings.WHARF_VLLM_VENV} (first install: ~3 min)")
            self.run_script(ENGINE_DIR / "install_venv.sh", str(settings.WHARF_VLLM_VENV))
        return runtime

    def run_script(self, script: Path, arg: str) -> None:
        if subprocess.call(["bash", str(script), arg]) != 0:
            raise CommandError(f"{script.name} failed; see its output above")

    def child_env(self, runtime: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(WHARF_HOME=str(settings.WHARF_HOME), WHARF_RUNTIME=runtime,
                   DJANGO_SETTINGS_MODULE="controlplane.settings")  # fmt: skip
        if not env.get("WHARF_SECRET_KEY"):
            env.setdefault("WHARF_SECRET_KEY_FILE", str(settings.WHARF_HOME / "secret_key"))
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
                events = api.get(f"/services/{name}/events?limit=5").json()
                raise CommandError(
                    f"demo failed: {service['last_error']}\n"
                    + "\n".join(f"  {e['reason']}: {e['message']}" for e in events)
                )
            time.sleep(2)
        raise CommandError(f"demo not running after {timeout:.0f} s")

    def summary(self, stack: Stack, api_token: str, token: str | None) -> None:
        out = self.stdout.write
        out("")
        out(self.style.SUCCESS("Wharf is up."))
        password = self.console_password or "(as set before; manage.py changepassword admin)"
        out(f"  Console      {stack.api_url}/  (user admin, password {password})")
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

    def wait_for_signal(self) -> None:
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        try:
            while not stop:
                time.sleep(1)
        except KeyboardInterrupt:
            pass

    def remove_instances(self) -> None:
        from workers.runtimes import get_runtime

        runtime = get_runtime()
        for instance in runtime.list():
            runtime.remove(instance.name)
