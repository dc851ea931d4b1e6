"""Every console form deploys exactly what it shows, in Chromium: the simple (custom image and
command) form, the LLM form, the LLM form with prefill/decode separation and the JSON editor
each fill in, preview, deploy, and the REST API then holds the very spec the preview showed.
The forms are drawn from the spec's JSON Schema (a schema served differently draws them
differently), check values against it before anything is sent, and the JSON editor (Monaco)
marks what the schema refuses and completes field names; without Monaco it is a text area.

Only the console and its API run here (Django's live server on the test database; the API's
Redis and Celery broker on the test Redis): deploying is the API accepting and storing the spec
and queueing a reconcile pass, which no worker takes here, so no engine starts."""

from __future__ import annotations

import base64
import json

import pytest
import redis
from django.contrib.auth import get_user_model

from contracts import reconcile
from contracts.spec import REDACTED
from controlplane import intents
from controlplane.nodes.models import Node
from controlplane.services.models import Service
from tests.api_support import client_for, grant, member
from tests.browser.chromium import require_browser, require_editor, signed_in
from tests.browser.deploy_page import (
    EDITOR_MODEL,
    deploy,
    open_deploy,
    shown_spec,
    upload_json,
    wait_preview,
)

PASSWORD = "forms-test-password"
RECONCILE = "workers.tasks.reconcile_service"


@pytest.fixture
def broker(settings, redis_url):
    """The API's Redis and Celery broker on the test Redis, its default queue emptied."""
    settings.REDIS_URL = redis_url
    settings.CELERY_BROKER_URL = redis_url.replace("unix://", "redis+socket://", 1)
    intents._celery.cache_clear()
    client = redis.Redis.from_url(redis_url)
    client.delete("celery", *client.keys(reconcile.pending_key("*")))
    yield client
    client.delete("celery", *client.keys(reconcile.pending_key("*")))
    intents._celery.cache_clear()


def queued(client: redis.Redis) -> list[tuple[str, list]]:
    """(task name, args) of every message in the default queue, oldest first."""
    found = []
    for raw in reversed(client.lrange("celery", 0, -1)):  # Celery pushes on the left
        message = json.loads(raw)
        args, _, _ = json.loads(base64.b64decode(message["body"]))
        found.append((message["headers"]["task"], args))
    return found


@pytest.fixture
def page(live_server, transactional_db, monkeypatch, broker):
    require_browser()
    # Playwright's sync API keeps its event loop set in this thread while the test runs, and
    # Django would take the test's own (synchronous) queries for calls from async code.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    member(get_user_model().objects.create_user("forms-user", password=PASSWORD))
    with signed_in(live_server.url, "forms-user", PASSWORD) as page:
        yield page


@pytest.fixture
def rest():
    return client_for("forms-api")


def deployed(page, rest, broker, name: str) -> tuple[dict, dict]:
    """Deploys the page's spec: (the spec its preview showed, the spec the API holds)."""
    shown = shown_spec(page)
    deploy(page, name)
    response = rest.get(f"/api/v1/services/{name}")
    assert response.status_code == 200, response.content
    assert (RECONCILE, [name]) in queued(broker)  # the workers were asked to act on it
    return shown, response.json()["spec"]


def test_simple_form_deploys_what_its_preview_shows(live_server, page, rest, broker):
    open_deploy(page, live_server.url, "custom")
    form = "#form-custom"
    page.fill(f'{form} [name="name"]', "simple-files")
    page.fill(f'{form} [name="containers[0].image"]', "wharf/vllm-cpu:0.32.0")
    page.fill(f'{form} [name="containers[0].command"]', "exec python3 -m http.server $PORT")
    page.fill(f'{form} [name="containers[0].port"]', "8001")
    page.click("#add-env")
    page.fill("#custom-env [data-item=name] input", "GREETING")
    page.fill("#custom-env [data-item=value] input", "hello there ")
    page.click("#add-mount")
    page.select_option("#custom-mounts select[data-role=kind]", "empty_dir")
    page.fill("#custom-mounts [data-item=mount_path] input", "/cache")
    page.select_option('#custom-mounts [data-item="empty_dir.medium"] select', "memory")
    page.fill('#custom-mounts [data-item="empty_dir.size_limit"] input', "1")
    wait_preview(page, lambda t: t == "exec python3 -m http.server $PORT")
    page.wait_for_selector("#preview-details dd:has-text('GREETING=hello there')")
    page.wait_for_selector("#preview-details dd:has-text('/cache ← tmpfs (1 GiB)')")

    shown, stored = deployed(page, rest, broker, "simple-files")
    assert stored == shown == {
        "name": "simple-files",
        "containers": [{
            "image": "wharf/vllm-cpu:0.32.0", "command": "exec python3 -m http.server $PORT",
            "port": 8001, "env": [{"name": "GREETING", "value": "hello there "}],
        }],
        "storage": [{"mount_path": "/cache", "empty_dir": {"medium": "memory", "size_limit": 1}}],
        "metadata": {"instance": 1, "gpu": 0},  # the schema's defaults, shown and sent
    }  # fmt: skip


def test_llm_form_deploys_what_its_preview_shows(live_server, page, rest, broker):
    open_deploy(page, live_server.url, "llm")
    form = "#form-llm"
    page.fill(f'{form} [name="name"]', "llm-form")
    page.select_option(f'{form} [name="llm.engine"]', "vllm-cpu")
    page.fill(f'{form} [name="llm.model"]', "tiny-llama")
    page.fill(f'{form} [name="llm.max_model_len"]', "512")
    page.fill(f'{form} [name="metadata.cpu"]', "2")
    page.click("text=Speculative decoding")
    page.fill(f'{form} [name="llm.speculative.model"]', "tiny-llama")
    page.fill(f'{form} [name="llm.speculative.num_speculative_tokens"]', "3")
    page.click("#add-option")
    page.fill("#llm-options [name=option-name]", "--seed")
    page.fill("#llm-options [name=option-value]", "7")
    page.click("#add-flag")
    page.fill("#llm-flags [name=flag-name]", "--enable-prefix-caching")
    wait_preview(page, lambda t: "--speculative-config" in t and "--seed 7" in t)
    assert page.locator(f'{form} [name="metadata.gpu"]').is_hidden()  # a CPU engine: no cards

    shown, stored = deployed(page, rest, broker, "llm-form")
    assert stored == shown == {
        "name": "llm-form",
        "llm": {
            "engine": "vllm-cpu", "model": "tiny-llama", "tensor_parallel_size": 1,
            "max_model_len": 512,
            "speculative": {"model": "tiny-llama", "method": "draft_model",
                            "num_speculative_tokens": 3},
            "options": {"--seed": 7, "--enable-prefix-caching": True},
        },
        "metadata": {"instance": 1, "cpu": 2},
    }  # fmt: skip


def test_llm_form_with_lora_adapters_deploys_what_its_preview_shows(live_server, page, rest,
                                                                   broker):  # fmt: skip
    grant(platform_buckets=["oss://bucket"])  # the chat adapter is read with the platform's keys
    open_deploy(page, live_server.url, "llm")
    form = "#form-llm"
    page.fill(f'{form} [name="name"]', "llm-lora")
    page.select_option(f'{form} [name="llm.engine"]', "vllm-cpu")
    page.fill(f'{form} [name="llm.model"]', "tiny-llama")
    page.click("text=LoRA adapters")
    page.fill(f'{form} [name="llm.lora.max_loras"]', "2")
    for n, (adapter, model) in enumerate((("sql", "tiny-sql"), ("chat", "oss://bucket/chat/"))):
        page.click("#add-adapter")
        row = page.locator("#llm-adapters .pair").nth(n)
        row.locator("[data-item=name] input").fill(adapter)
        row.locator("[data-item=model] input").fill(model)
    wait_preview(page, lambda t: "--lora-modules sql=/models/tiny-sql chat=" in t
                 and "--max-loras 2" in t)  # fmt: skip

    shown, stored = deployed(page, rest, broker, "llm-lora")
    assert stored == shown == {
        "name": "llm-lora",
        "llm": {
            "engine": "vllm-cpu", "model": "tiny-llama", "tensor_parallel_size": 1,
            "lora": {"max_loras": 2, "adapters": [{"name": "sql", "model": "tiny-sql"},
                                                  {"name": "chat", "model": "oss://bucket/chat/"}]},
        },
        "metadata": {"instance": 1},
    }  # fmt: skip


def test_llm_form_with_prefill_decode_deploys_what_its_preview_shows(
    live_server, page, rest, broker
):
    open_deploy(page, live_server.url, "llm")
    form = "#form-llm"
    page.fill(f'{form} [name="name"]', "pd-form")
    page.select_option(f'{form} [name="llm.engine"]', "vllm")
    page.fill(f'{form} [name="llm.model"]', "tiny-llama")
    page.click("text=Prefill/decode separation")
    # The roles count their own instances and cards: the service-wide fields step aside.
    assert page.locator(f'{form} [name="metadata.instance"]').is_hidden()
    assert page.locator(f'{form} [name="llm.pd.prefill.npu"]').is_hidden()  # GPUs for vllm
    assert page.input_value(f'{form} [name="llm.pd.kv_connector"]') == "ExampleConnector"
    page.fill(f'{form} [name="llm.pd.prefill.gpu"]', "1")
    page.fill(f'{form} [name="llm.pd.decode.instance"]', "2")
    page.fill(f'{form} [name="llm.pd.decode.gpu"]', "1")
    wait_preview(page, lambda t: "--kv-transfer-config" in t)
    assert page.query_selector(".field-error") is None

    shown, stored = deployed(page, rest, broker, "pd-form")
    assert stored == shown == {
        "name": "pd-form",
        "llm": {
            "engine": "vllm", "model": "tiny-llama", "tensor_parallel_size": 1,
            "pd": {"prefill": {"instance": 1, "gpu": 1}, "decode": {"instance": 2, "gpu": 1},
                   "kv_connector": "ExampleConnector"},
        },
    }  # fmt: skip
    assert rest.get("/api/v1/services/pd-form").json()["replicas"] == {"prefill": 1, "decode": 2}


SPEC_WITH_COMMENT = """{
  // EAS's JSON format; comments are allowed
  "name": "json-editor",
  "containers": [{"image": "wharf/vllm-cpu:0.32.0",
                  "command": "exec python3 -m http.server $PORT", "port": 8001}],
  "metadata": {"instance": 2, "cpu": 0.5}
}"""


def test_json_editor_deploys_what_its_preview_shows(live_server, page, rest, broker):
    require_editor()
    open_deploy(page, live_server.url, "json", editor="monaco")
    upload_json(page, SPEC_WITH_COMMENT)
    wait_preview(page, lambda t: t == "exec python3 -m http.server $PORT")
    shown, stored = deployed(page, rest, broker, "json-editor")
    assert stored == shown == json.loads(SPEC_WITH_COMMENT.replace(
        "// EAS's JSON format; comments are allowed", ""))  # fmt: skip


# A field in no EAS document, a typo (line 3), and an empty line inside metadata (line 5).
UNKNOWN_FIELD = '{\n  "name": "typo",\n  "clouds": {"computing": 1},\n  "metadata": {\n    \n  }\n}'


def test_json_editor_marks_unknown_fields_and_completes_field_names(live_server, page):
    require_editor()
    open_deploy(page, live_server.url, "json", editor="monaco")
    upload_json(page, UNKNOWN_FIELD)
    # The schema's refusal, drawn under the field, with the schema's words on hover.
    squiggle = page.wait_for_selector("#json-editor .squiggly-error")
    markers = page.evaluate(f"() => monaco.editor.getModelMarkers({{resource: {EDITOR_MODEL}.uri}})"
                            ".map(m => [m.startLineNumber, m.message])")  # fmt: skip
    assert [3, "Property clouds is not allowed."] in markers  # a typo: in no EAS document
    assert squiggle.is_visible()
    page.hover("#json-editor .view-line span:text-is('\"clouds\"')")
    page.wait_for_selector(".monaco-hover:has-text('Property clouds is not allowed')")

    # Completion inside metadata lists the schema's fields of metadata, with their help.
    page.evaluate("""() => {
        const editor = monaco.editor.getEditors()[0];
        editor.setPosition({lineNumber: 5, column: 5});
        editor.focus();
    }""")
    page.keyboard.press("Control+Space")
    widget = page.wait_for_selector(".suggest-widget .monaco-list-row")
    labels = page.eval_on_selector_all(
        ".suggest-widget .monaco-list-row", "rows => rows.map(r => r.getAttribute('aria-label'))"
    )
    assert any(label.startswith("instance") for label in labels), labels
    assert widget.is_visible()
    page.keyboard.type("termination_g")  # the list, filtered: the schema's field with its help
    row = ".suggest-widget .monaco-list-row[aria-label^='termination_grace_period']"
    page.wait_for_selector(row)
    page.keyboard.press("Enter")
    completed = '"termination_grace_period"'
    page.wait_for_function(f"() => {EDITOR_MODEL}.getValue().includes('{completed}')")


def test_forms_are_drawn_from_the_schema_the_page_fetches(live_server, page):
    """A schema served with another engine and tighter bounds draws another form: the choices,
    bounds and help are the schema's, not the page's own copy."""

    def altered(route):
        schema = route.fetch().json()
        llm = schema["$defs"]["Llm"]["properties"]
        llm["engine"]["enum"].append("new-engine")
        length = llm["max_model_len"]["anyOf"][0]
        length["minimum"] = 32
        llm["max_model_len"]["description"] = "The longest context, in tokens."
        route.fulfill(json=schema)

    page.route("**/api/v1/schema/spec", altered)
    open_deploy(page, live_server.url, "llm")
    form = "#form-llm"
    options = page.eval_on_selector_all(
        f'{form} [name="llm.engine"] option', "options => options.map(o => o.value)"
    )
    assert options == ["vllm", "vllm-cpu", "vllm-ascend", "sglang", "bladellm", "tgi",
                       "paddlenlp", "new-engine"]  # fmt: skip
    length = f'{form} [name="llm.max_model_len"]'
    assert page.get_attribute(length, "min") == "32"
    help_text = page.inner_text(f'{form} [data-field="llm.max_model_len"] small')
    assert help_text == "The longest context, in tokens."

    # Checked against that schema before anything is sent: the error is at the field and
    # Deploy sends nothing.
    page.fill(f'{form} [name="name"]', "too-short")
    page.fill(f'{form} [name="llm.model"]', "tiny-llama")
    page.fill(length, "20")
    error = page.wait_for_selector('.field-error[data-error-path="llm.max_model_len"]')
    assert error.inner_text() == "Input should be greater than or equal to 32"
    page.click("#deploy")
    page.wait_for_selector("#general-errors:has-text('nothing was sent')")
    assert not Service.objects.filter(name="too-short").exists()


def test_json_editor_without_monaco_is_a_text_area_that_deploys(live_server, page, rest, broker):
    page.route("**/vendor/monaco/**", lambda route: route.abort())
    open_deploy(page, live_server.url, "json", editor="text")
    note = page.wait_for_selector("#json-editor-note")
    assert "plain text area" in note.inner_text() and "npm ci" in note.inner_text()
    page.fill("#json-text", SPEC_WITH_COMMENT.replace("json-editor", "json-text"))
    wait_preview(page, lambda t: t == "exec python3 -m http.server $PORT")
    shown, stored = deployed(page, rest, broker, "json-text")
    assert stored == shown and stored["metadata"] == {"instance": 2, "cpu": 0.5}


def test_llm_form_picks_a_hub_model_and_its_token_is_typed_not_shown(live_server, page, rest,
                                                                   broker):  # fmt: skip
    staff = get_user_model().objects.get(username="forms-user")
    staff.is_staff = True  # the nodes' models are listed to those who may list nodes
    staff.save()
    Node.objects.create(name="n1", address="127.0.0.1", cached_models=[
        "tiny-llama", "hf://wharf/tiny", "s3-bucket-models-0123456789abcdef"])  # fmt: skip
    open_deploy(page, live_server.url, "llm")
    form = "#form-llm"
    token_field = page.locator(f'{form} [data-field="llm.hub_token"]')
    page.fill(f'{form} [name="name"]', "llm-hub")
    page.select_option(f'{form} [name="llm.engine"]', "vllm-cpu")
    page.fill(f'{form} [name="llm.model"]', "tiny-llama")
    assert token_field.is_hidden()  # no hub model: no token to give
    choices = page.locator("#model-choices option")
    choices.filter(has_text="staged on a node").wait_for(state="attached")
    values = choices.evaluate_all("options => options.map(o => o.value)")
    assert values[:2] == ["hf://wharf/tiny", "tiny-llama"]  # the nodes' models, no cache keys
    assert {"hf://", "modelscope://", "oss://"} <= set(values)
    assert page.get_attribute(f'{form} [name="llm.model"]', "list") == "model-choices"
    page.fill(f'{form} [name="llm.model"]', "hf://wharf/tiny@main")
    token_field.wait_for(state="visible")
    assert page.get_attribute(f'{form} [name="llm.hub_token"]', "type") == "password"
    page.fill(f'{form} [name="llm.hub_token"]', "hf_form_secret_77")
    wait_preview(page, lambda t: "--model /models/hf/wharf/tiny@main" in t)

    shown, stored = deployed(page, rest, broker, "llm-hub")
    assert shown["llm"]["hub_token"] == "hf_form_secret_77"
    assert stored["llm"] == {"engine": "vllm-cpu", "model": "hf://wharf/tiny@main",
                             "hub_token": REDACTED, "tensor_parallel_size": 1}  # fmt: skip
    assert Service.objects.get(name="llm-hub").parsed_spec().llm.hub_token == "hf_form_secret_77"
