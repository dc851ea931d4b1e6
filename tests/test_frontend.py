"""The console's server side: sign-in, the pages, CSRF on session writes, the instance logs
endpoint and the online-test relay. The pages' JavaScript is tested in a real browser by
tests/browser/test_console.py."""

from __future__ import annotations

import json

import httpx
import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client

from controlplane.services.models import Instance, Service
from controlplane.tokens.models import ApiKey
from tests.api_support import default_workspace, member

pytestmark = pytest.mark.django_db

SPEC = {"name": "tiny", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}


@pytest.fixture
def user():
    bob = get_user_model().objects.create_user("bob", password="s3cret-pass")
    member(bob, "developer")
    return bob


@pytest.fixture
def client(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_console_requires_sign_in():
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"] == "/login/?next=/"


def test_sign_in_and_out_with_django_users(user):
    client = Client()
    page = client.get("/login/").content.decode()
    assert 'name="username"' in page and "csrfmiddlewaretoken" in page
    wrong = client.post("/login/", {"username": "bob", "password": "nope"})
    assert wrong.status_code == 200 and "alert error" in wrong.content.decode()
    signed_in = client.post("/login/", {"username": "bob", "password": "s3cret-pass"})
    assert signed_in.status_code == 302 and signed_in["Location"] == "/"
    assert client.get("/").status_code == 200
    signed_out = client.post("/logout/")
    assert signed_out.status_code == 302 and signed_out["Location"] == "/login/"
    assert client.get("/").status_code == 302


def test_pages_render_for_a_signed_in_user(client):
    services = client.get("/").content.decode()
    assert 'id="services"' in services and "services.js" in services and "Sign out" in services
    deploy = client.get("/deploy/").content.decode()
    assert 'data-field="llm.engine"' in deploy  # its choices come from /api/v1/schema/spec
    assert 'id="preview-command"' in deploy and 'id="json-text"' in deploy
    config = client.get("/deploy/").context["config"]
    assert config["api"] == "/api/v1" and config["csrfToken"]


def test_service_page_exists_only_for_a_live_service(client):
    assert client.get("/services/tiny/").status_code == 404
    Service.objects.create(workspace=default_workspace(), name="tiny", spec=SPEC)
    page = client.get("/services/tiny/")
    assert page.status_code == 200 and page.context["config"]["service"] == "tiny"


def test_the_console_acts_in_the_workspace_the_switcher_chose(client, user):
    team = member(user, "viewer", "team")
    Service.objects.create(workspace=default_workspace(), name="tiny", spec=SPEC)
    Service.objects.create(workspace=team, name="theirs", spec={**SPEC, "name": "theirs"})
    home = client.get("/")
    assert home.context["workspaces"] == ["default", "team"]
    assert home.context["config"]["workspace"] == "default"
    assert 'id="workspace-switch"' in home.content.decode()
    assert "Deploy service" in home.content.decode()  # a developer here
    assert client.get("/services/theirs/").status_code == 404  # another workspace's
    assert [s["name"] for s in client.get("/api/v1/services").json()] == ["tiny"]
    switched = client.post("/console/workspace", {"workspace": "team"})
    assert switched.status_code == 302
    home = client.get("/")
    assert (home.context["config"]["workspace"], home.context["config"]["role"]) == (
        "team", "viewer")  # fmt: skip
    assert "Deploy service" not in home.content.decode()  # a viewer there
    assert client.get("/services/theirs/").status_code == 200
    assert 'id="svc-actions"' not in client.get("/services/theirs/").content.decode()
    assert 'id="deploy-refused"' in client.get("/deploy/").content.decode()
    assert [s["name"] for s in client.get("/api/v1/services").json()] == ["theirs"]
    assert client.post("/console/workspace", {"workspace": "nope"}).status_code == 404


def test_a_user_of_no_workspace_is_told_so():
    client = Client()
    client.force_login(get_user_model().objects.create_user("eve"))
    page = client.get("/")
    assert page.status_code == 403
    assert "not a member of any workspace" in page.content.decode()


def test_session_writes_to_the_api_need_the_csrf_token(user):
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    refused = client.post("/api/v1/services/preview", SPEC, content_type="application/json")
    assert refused.status_code == 403 and "CSRF" in refused.json()["detail"]
    client.get("/")  # the console page sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    preview = client.post(
        "/api/v1/services/preview", SPEC, content_type="application/json", HTTP_X_CSRFTOKEN=token
    )
    assert preview.status_code == 200
    assert "--model" in preview.json()["containers"][0]["command"]


@pytest.fixture
def instance(settings, redis_url, tmp_path):
    """tiny-abc on node n, whose worker's log server answers from a real process runtime."""
    from workers.nodes.node_logs import LogServer
    from workers.runtimes.process import ProcessRuntime

    settings.REDIS_URL = redis_url
    (tmp_path / "instances").mkdir()
    lines = "\n".join(f"line {i}" for i in range(300))
    (tmp_path / "instances" / "tiny-abc.log").write_text(lines)
    server = LogServer("n", ProcessRuntime(str(tmp_path), tmp_path / "instances"))
    server.start()
    service = Service.objects.create(workspace=default_workspace(), name="tiny", spec=SPEC)
    Service.objects.create(
        workspace=default_workspace(), name="other", spec={**SPEC, "name": "other"}
    )
    yield Instance.objects.create(
        service=service, name="tiny-abc", runtime="process", node="n", spec_hash="x", state="ready"
    )
    server.stop()
    server.join(5)


def test_instance_logs_come_from_the_instances_node(client, instance):
    response = client.get("/api/v1/services/tiny/instances/tiny-abc/logs?tail=50")
    assert response.status_code == 200
    body = response.json()
    assert (body["instance"], body["tail"]) == ("tiny-abc", 50)
    assert body["logs"].splitlines() == [f"line {i}" for i in range(250, 300)]
    default = client.get("/api/v1/services/tiny/instances/tiny-abc/logs").json()
    assert default["tail"] == 200 and len(default["logs"].splitlines()) == 200


def test_a_node_that_does_not_answer_is_named(client, instance, monkeypatch):
    Instance.objects.filter(name="tiny-abc").update(node="gone")
    monkeypatch.setattr("contracts.node_logs.fetch.__defaults__", (0.5,))
    response = client.get("/api/v1/services/tiny/instances/tiny-abc/logs")
    assert response.status_code == 504 and "node gone did not answer" in response.json()["detail"]


def test_instance_logs_only_of_the_services_own_instances(client, instance):
    assert client.get("/api/v1/services/other/instances/tiny-abc/logs").status_code == 404
    assert client.get("/api/v1/services/tiny/instances/nope/logs").status_code == 404
    for bad in ("0", "abc", "5001"):
        response = client.get(f"/api/v1/services/tiny/instances/tiny-abc/logs?tail={bad}")
        assert response.status_code == 400 and "tail" in response.json()["errors"]
    assert Client().get("/api/v1/services/tiny/instances/tiny-abc/logs").status_code in (401, 403)


SSE = (
    b'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"lo"}}]}\n\n'
    b"data: [DONE]\n\n"
)


class Events(httpx.AsyncByteStream):
    """The events one at a time, as an engine streams them."""

    async def __aiter__(self):
        for event in SSE.split(b"\n\n")[:-1]:
            yield event + b"\n\n"


@pytest.fixture
def gateway(monkeypatch):
    """A stand-in gateway: records requests; answers 401 while `reject` counts down."""
    from frontend import online_test

    state = {"requests": [], "reject": 0, "published": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        state["requests"].append(request)
        if state["reject"]:
            state["reject"] -= 1
            return httpx.Response(401, json={"error": {"message": "invalid token"}})
        if json.loads(request.content).get("max_tokens") == 0:
            return httpx.Response(503, json={"error": {"message": "no ready instance"}})
        return httpx.Response(200, stream=Events(), headers={"content-type": "text/event-stream"})

    def publish() -> None:
        state["published"] += 1

    monkeypatch.setattr(online_test, "TRANSPORT", httpx.MockTransport(handler))
    monkeypatch.setattr(online_test, "publish_snapshot", publish)
    monkeypatch.setattr(online_test.asyncio, "sleep", _no_sleep)
    return state


async def _no_sleep(seconds: float) -> None:
    return None


def _call(user, name: str, payload: dict, login: bool = True):
    async def call():
        client = AsyncClient()
        if login:
            await client.aforce_login(user)
        response = await client.post(
            f"/console/services/{name}/test", payload, content_type="application/json"
        )
        if response.streaming:
            body = b"".join([chunk async for chunk in response.streaming_content])
        else:
            body = response.content
        # The session carries the console key between calls, as a browser's cookie would.
        return response, body, client

    return async_to_sync(call)()


def test_online_test_relays_the_gateways_events_with_a_console_key(user, gateway, settings):
    settings.WHARF_GATEWAY_URL = "http://gateway.test:9000"
    Service.objects.create(workspace=default_workspace(), name="tiny", spec=SPEC)
    gateway["reject"] = 2  # the gateway has not loaded the new key yet
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}
    response, content, _ = _call(user, "tiny", {"path": "chat/completions", "body": body})
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    assert content == SSE
    (key,) = ApiKey.objects.all()
    assert key.owner == user and key.expires_at is not None and gateway["published"] == 1
    last = gateway["requests"][-1]
    assert str(last.url) == "http://gateway.test:9000/v1/chat/completions"
    assert last.headers["Authorization"].startswith("Bearer wak-")
    sent = json.loads(last.content)
    assert sent["model"] == "tiny" and sent["stream"] is True and sent["max_tokens"] == 8
    assert sent["stream_options"] == {"include_usage": True}
    assert len(gateway["requests"]) == 3  # two 401s while the key propagated, then the call


def test_the_console_key_is_sealed_in_the_session_and_reused(user, gateway):
    from django.contrib.sessions.models import Session

    Service.objects.create(workspace=default_workspace(), name="tiny", spec=SPEC)
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}

    async def twice():
        client = AsyncClient()
        await client.aforce_login(user)
        for _ in range(2):
            response = await client.post("/console/services/tiny/test",
                                         {"path": "chat/completions", "body": body},
                                         content_type="application/json")  # fmt: skip
            assert response.status_code == 200
            b"".join([chunk async for chunk in response.streaming_content])

    async_to_sync(twice)()
    sent = {r.headers["Authorization"] for r in gateway["requests"]}
    (key,) = sent  # one key, reused by the second call
    assert ApiKey.objects.count() == 1
    (session,) = Session.objects.all()
    stored = str(session.get_decoded()) + session.session_data
    assert key.removeprefix("Bearer ") not in stored and "wak-" not in stored


def test_online_test_passes_gateway_errors_through(user, gateway):
    Service.objects.create(workspace=default_workspace(), name="tiny", spec=SPEC)
    response, content, _ = _call(user, "tiny", {"path": "completions", "body": {"max_tokens": 0}})
    assert response.status_code == 503
    assert json.loads(content)["error"]["message"] == "no ready instance"


def test_online_test_refuses_bad_requests(user, gateway):
    Service.objects.create(workspace=default_workspace(), name="tiny", spec=SPEC)
    assert _call(user, "tiny", {"path": "embeddings"})[0].status_code == 400
    assert _call(user, "tiny", {"body": []})[0].status_code == 400
    assert _call(user, "nope", {})[0].status_code == 404
    assert _call(user, "tiny", {}, login=False)[0].status_code == 401
    assert gateway["requests"] == []
