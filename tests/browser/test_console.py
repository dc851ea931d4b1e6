"""The web console end to end, in Chromium: sign in, deploy the tiny vLLM CPU model with the
LLM form and watch it reach running, the run command preview, free editing, the JSON editor's
field errors, logs, events, call information, the online test streaming through the gateway,
usage charts, scale, stop and delete. Every page is saved to test-artifacts/screenshots/.
(That each form deploys exactly what it shows: test_deploy_forms.py.)

The tests run in order and share one signed-in browser and one system, like a user's session.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.browser.deploy_page import (
    EDITOR_MODEL,
    editor_text,
    open_deploy,
    upload_json,
    wait_preview,
)

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

LLM_SERVICE = "tiny-form"
EDITED_SERVICE = "tiny-edit"
JSON_SERVICE = "files-json"
# A custom service from the JSON editor: the process runtime runs the command with the engine
# virtualenv's Python first on PATH, and $PORT is the port it was given.
JSON_SPEC = """{
  // EAS's JSON format; comments are allowed
  "name": "files-json",
  "containers": [
    {
      "image": "wharf/vllm-cpu:0.32.0",
      "command": "exec python3 -m http.server $PORT --bind 127.0.0.1",
      "port": 8080
    }
  ],
  "metadata": {"instance": 1}
}"""


def test_sign_in(console):
    page = console.page()
    page.goto(console.url + "/")
    assert "/login/" in page.url  # the console needs a signed-in user
    console.shot(page, "01-login")
    page.fill("input[name=username]", console.username)
    page.fill("input[name=password]", "not-the-password")
    page.click("button[type=submit]")
    page.wait_for_selector(".alert.error")
    page.fill("input[name=password]", console.password)
    page.click("button[type=submit]")
    page.wait_for_selector("h1:has-text('Services')")
    assert page.url.rstrip("/") == console.url
    page.wait_for_selector("#services td:has-text('No services yet')")
    page.close()


def field(name: str, form: str = "#form-llm") -> str:
    """The widget of the spec's field `name` (a schema path) in a deploy form."""
    return f'{form} [name="{name}"]'


def fill_llm_form(console, page, name: str) -> None:
    open_deploy(page, console.url, "llm")
    page.fill(field("name"), name)
    page.select_option(field("llm.engine"), "vllm-cpu")
    page.fill(field("llm.model"), "tiny-llama")
    page.fill(field("llm.max_model_len"), "512")


def test_preview_follows_the_form(console):
    page = console.page()
    open_deploy(page, console.url, "llm")
    page.fill(field("name"), LLM_SERVICE)
    page.select_option(field("llm.engine"), "vllm-cpu")
    page.fill(field("llm.model"), "tiny-llama")
    text = wait_preview(page, lambda t: "--model" in t and "tiny-llama" in t)
    assert "vllm.entrypoints.openai.api_server" in text and "--max-model-len" not in text
    # The chunked prefill size has no default in the schema: the engine's own applies.
    assert page.input_value(field("llm.chunked_prefill_size")) == ""
    assert "--max-num-batched-tokens" not in text

    page.fill(field("llm.max_model_len"), "384")
    wait_preview(page, lambda t: "--max-model-len 384" in t)
    page.fill(field("llm.tensor_parallel_size"), "2")
    wait_preview(page, lambda t: "--tensor-parallel-size 2" in t)
    page.fill(field("llm.tensor_parallel_size"), "1")
    page.fill(field("llm.max_model_len"), "512")
    page.fill(field("llm.chunked_prefill_size"), "2048")
    wait_preview(
        page,
        lambda t: "--max-model-len 512" in t and "--tensor-parallel" not in t
        and "--max-num-batched-tokens 2048" in t,
    )  # fmt: skip

    # Another engine renders another command: BladeLLM's server on two GPUs, with the 64 GB
    # of shared memory the API gives multi-card instances. BladeLLM has no max-model-len flag:
    # the engine's own error shows at that field.
    page.select_option(field("llm.engine"), "bladellm")
    page.fill(field("metadata.gpu"), "2")
    page.wait_for_selector('.field-error[data-error-path="llm.max_model_len"]')
    page.fill(field("llm.max_model_len"), "")
    wait_preview(page, lambda t: t.startswith("blade_llm_server"))
    page.wait_for_selector("#preview-details dt:text-is('Shared memory') + dd:text-is('64 GiB')")
    assert page.input_value(field("metadata.shm_size")) == ""  # left to the API's default
    page.fill(field("llm.max_model_len"), "512")
    page.select_option(field("llm.engine"), "vllm-cpu")
    wait_preview(page, lambda t: "vllm.entrypoints" in t)
    assert page.locator(field("metadata.gpu")).is_hidden()  # a CPU engine takes no cards

    # The API refuses port 8080 (a rule beyond the schema); the error shows at the port field.
    page.fill(field("containers[0].port"), "8080")
    error = page.wait_for_selector('.field-error[data-error-path="containers[0].port"]')
    assert "reserved" in error.inner_text()
    console.shot(page, "02-deploy-llm-port-error")
    page.fill(field("containers[0].port"), "")
    page.wait_for_selector('.field-error[data-error-path="containers[0].port"]', state="detached")

    # Prefill/decode separation, sent only when switched on: the API takes it, and the preview
    # shows the prefill instance's command with its KV-cache transfer.
    page.click("text=Prefill/decode separation")
    wait_preview(page, lambda t: "--kv-transfer-config" in t and "--max-model-len 512" in t)
    assert page.query_selector(".field-error") is None
    # The schema's bound, checked in the page before anything is sent...
    page.fill(field("llm.pd.decode.instance"), "0")
    error = page.wait_for_selector('.field-error[data-error-path="llm.pd.decode.instance"]')
    assert "greater than or equal to 1" in error.inner_text()
    page.fill(field("llm.pd.decode.instance"), "1")
    page.wait_for_selector(".field-error", state="detached")
    # ...and the API's rules across fields, shown at the fields it names: vLLM's roles on GPUs.
    page.select_option(field("llm.engine"), "vllm")
    error = page.wait_for_selector('.field-error[data-error-path="llm.pd.decode.gpu"]')
    assert "needs at least 1 GPU" in error.inner_text()
    page.fill(field("llm.pd.prefill.gpu"), "1")
    page.fill(field("llm.pd.decode.gpu"), "1")
    page.wait_for_selector(".field-error", state="detached")
    wait_preview(page, lambda t: "--kv-transfer-config" in t and "--enforce-eager" not in t)
    console.shot(page, "03-deploy-llm-pd")
    page.select_option(field("llm.engine"), "vllm-cpu")
    page.click("text=Prefill/decode separation")
    wait_preview(page, lambda t: "--max-model-len 512" in t and "--kv-transfer" not in t)
    console.shot(page, "03-deploy-llm")
    page.close()


def test_custom_form_previews_and_shows_field_errors(console):
    page = console.page()
    open_deploy(page, console.url, "custom")
    form = "#form-custom"
    page.fill(field("name", form), "my-server")
    page.fill(field("containers[0].command", form), "exec python3 -m http.server $PORT")
    # No image and no llm section: the preview lists what is missing, and deploying marks
    # the field the API names.
    page.wait_for_selector('#preview-errors li:has-text("containers[0].image")')
    assert not page.query_selector(".field-error")  # the image field was not reached yet
    page.click("#deploy")
    error = page.wait_for_selector('.field-error[data-error-path="containers[0].image"]')
    assert "image" in error.inner_text()
    page.fill(field("containers[0].image", form), "wharf/vllm-cpu:0.32.0")
    page.fill(field("containers[0].port", form), "8001")
    page.click("#add-env")
    page.fill("#custom-env [data-item=name] input", "GREETING")
    page.fill("#custom-env [data-item=value] input", "hello")
    page.click("#add-mount")
    page.select_option("#custom-mounts select[data-role=kind]", "empty_dir")
    page.select_option('#custom-mounts [data-item="empty_dir.medium"] select', "memory")
    page.fill("#custom-mounts [data-item=mount_path] input", "/cache")
    page.fill('#custom-mounts [data-item="empty_dir.size_limit"] input', "1")
    wait_preview(page, lambda t: t == "exec python3 -m http.server $PORT")
    page.wait_for_selector("#preview-details dd:has-text('GREETING=hello')")
    page.wait_for_selector("#preview-details dd:has-text('/cache ← tmpfs (1 GiB)')")
    assert not page.query_selector(".field-error")
    console.shot(page, "03b-deploy-custom")
    page.close()


def test_llm_form_deploys_the_tiny_model_and_it_reaches_running(console):
    page = console.page()
    fill_llm_form(console, page, LLM_SERVICE)
    wait_preview(page, lambda t: "--max-model-len 512" in t)
    page.click("#deploy")
    token = page.wait_for_selector("#created-token").inner_text()
    assert token.startswith("wsk-")
    page.click("dialog button[data-role=open]")
    page.wait_for_url(f"**/services/{LLM_SERVICE}/")
    # A marker a reload would wipe: the page must reach running by polling alone.
    page.evaluate("window.__noReload = true")
    phases, progress = set(), set()
    deadline = time.monotonic() + 600
    shot_taken = False
    while time.monotonic() < deadline:
        phase = page.inner_text("#svc-phase")
        phases.add(phase)
        if text := page.inner_text("#svc-progress").strip():
            progress.add(text)
            if not shot_taken and phase != "running":
                console.shot(page, "04-service-deploying")
                shot_taken = True
        if phase in ("running", "failed"):
            break
        page.wait_for_timeout(500)
    assert phase == "running", f"phases {phases}, progress {progress}"
    assert page.evaluate("window.__noReload") is True
    assert phases - {"running"}, "the page never showed the service on its way to running"
    assert progress, "no progress text was shown while deploying"
    page.wait_for_selector("#svc-instances .badge.ready")
    assert "1/1" in page.inner_text("#svc-summary")
    console.shot(page, "05-service-overview")
    page.close()


def test_free_edited_command_is_what_deploys(console):
    page = console.page()
    fill_llm_form(console, page, EDITED_SERVICE)
    wait_preview(page, lambda t: "--max-model-len 512" in t)
    page.click("text=Edit freely")
    editor = page.wait_for_selector("#edit-command")
    assert "--max-model-len 512" in editor.input_value()
    editor.fill(editor.input_value() + " \\\n  --seed 7")
    page.fill(field("llm.max_model_len"), "1024")  # the edited command still wins
    page.wait_for_timeout(600)
    assert editor.input_value().endswith("--seed 7")
    console.shot(page, "06-deploy-free-edit")
    page.click("#deploy")
    page.wait_for_selector("#created-token")
    page.click("dialog button[data-role=open]")
    page.wait_for_url(f"**/services/{EDITED_SERVICE}/")
    with console.system.api() as api:
        spec = api.get(f"/services/{EDITED_SERVICE}").json()["spec"]
        assert api.delete(f"/services/{EDITED_SERVICE}").status_code == 202
    (container,) = spec["containers"]
    assert container["command"].startswith("python -m vllm.entrypoints.openai.api_server")
    command = container["command"]
    assert command.endswith("--seed 7") and "--max-model-len 512" in command
    assert container["image"] == "wharf/vllm-cpu:0.32.0"
    page.close()


def test_online_test_streams_the_answer(console):
    page = console.page()
    page.goto(f"{console.url}/services/{LLM_SERVICE}/#test")
    page.fill("#test-form textarea[name=prompt]", "Once upon a time")
    page.fill("#test-form input[name=max_tokens]", "400")
    # Random weights may emit EOS at once; ignore_eos makes the answer long enough to watch.
    page.fill("#test-form textarea[name=extra]", '{"ignore_eos": true}')
    page.evaluate("""() => {
        window.__lengths = [];
        const out = document.getElementById('test-output');
        const record = () => window.__lengths.push([performance.now(), out.textContent.length]);
        new MutationObserver(record)
            .observe(out, {childList: true, characterData: true, subtree: true});
    }""")
    page.click("#test-send")
    page.wait_for_selector("#test-meta:has-text('done')", timeout=120_000)
    lengths = page.evaluate("window.__lengths")
    growing = [n for _, n in lengths if n > 0]
    # A buffering relay would show the answer once, whole. How many pieces there are depends
    # on the machine's load: vLLM merges the tokens a slow reader has not taken yet into one
    # event, so a busy 2-core machine may show only a few.
    assert len(set(growing)) >= 2, f"the answer did not arrive piece by piece: {growing[:20]}"
    assert growing == sorted(growing)
    assert lengths[-1][0] - lengths[0][0] > 50  # over time, not in one burst
    assert "400" in page.inner_text("#test-meta")  # the usage's completion tokens
    console.shot(page, "07-service-online-test")
    page.close()


def test_call_information_issues_a_working_token(console):
    page = console.page()
    page.goto(f"{console.url}/services/{LLM_SERVICE}/#call")
    page.wait_for_selector("#call-snippets pre")
    assert f"/api/predict/{LLM_SERVICE}" in page.inner_text("#call-endpoints")
    page.click("#token-reveal")
    page.wait_for_selector("dialog[open] >> text=stops working at once")
    console.shot(page, "08-token-confirm", full_page=False)
    page.click("dialog button[data-role=ok]")
    page.wait_for_function("document.getElementById('token-value').textContent.startsWith('wsk-')")
    token = page.inner_text("#token-value")
    assert token in page.inner_text("#call-snippets")
    console.shot(page, "09-service-call-information")
    gateway = console.system.stack.gateway_url
    answer = httpx.post(
        f"{gateway}/api/predict/{LLM_SERVICE}/v1/completions",
        headers={"Authorization": token},
        json={"model": LLM_SERVICE, "prompt": "Hi", "max_tokens": 4, "ignore_eos": True},
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    page.close()


def test_logs_and_events(console):
    page = console.page()
    page.goto(f"{console.url}/services/{LLM_SERVICE}/#logs")
    page.wait_for_function(
        "document.getElementById('log-text').textContent.includes('vllm')", timeout=30_000
    )
    console.shot(page, "10-service-logs")
    page.click("#svc-tabs [data-tab=events]")
    page.wait_for_selector("#svc-events td:has-text('Created')")
    page.wait_for_selector("#svc-events td:has-text('InstanceReady')")
    console.shot(page, "11-service-events")
    page.close()


def test_json_editor_shows_field_errors_and_deploys(console):
    page = console.page()
    open_deploy(page, console.url, "json", editor="monaco")
    upload_json(page, JSON_SPEC)
    page.wait_for_selector('#preview-errors li:has-text("containers[0].port")')
    page.click("#deploy")
    item = page.wait_for_selector('#json-errors li[data-path="containers[0].port"]')
    assert "reserved" in item.inner_text()
    port_line = next(
        n for n, line in enumerate(JSON_SPEC.splitlines(), 1) if '"port"' in line
    )  # fmt: skip
    assert item.get_attribute("data-line") == str(port_line)
    # The API's error is also marked at its line in the editor.
    marked = page.evaluate(f"""() => monaco.editor.getModelMarkers({{owner: 'wharf-api'}})
        .filter(m => m.resource.toString() === {EDITOR_MODEL}.uri.toString())
        .map(m => m.startLineNumber)""")
    assert port_line in marked
    page.wait_for_selector("#json-editor .squiggly-error")
    console.shot(page, "12-deploy-json-error")

    upload_json(page, JSON_SPEC.replace('"port": 8080', '"port": 8001'))
    page.wait_for_selector('#json-errors li[data-path="containers[0].port"]', state="detached")
    page.click("#deploy")
    page.wait_for_selector("#created-token")
    page.click("dialog button[data-role=open]")
    page.wait_for_url(f"**/services/{JSON_SERVICE}/")
    page.wait_for_selector("#svc-phase.running", timeout=180_000)

    # Edit spec: the stored spec in the JSON editor, saved with PUT (a new generation).
    page.click("text=Edit spec")
    page.wait_for_selector("h1:has-text('Update files-json')")
    page.wait_for_selector("body[data-deploy-ready=monaco]")
    page.wait_for_function(f"() => {EDITOR_MODEL}.getValue().includes('http.server')")
    text = editor_text(page)
    edited = text.replace("--bind 127.0.0.1", "--bind 127.0.0.1 --protocol HTTP/1.1")
    upload_json(page, edited)
    page.click("#deploy")
    page.wait_for_url(f"**/services/{JSON_SERVICE}/")
    page.wait_for_selector("#svc-summary dd:has-text('2 of 2 applied')", timeout=180_000)
    page.close()


def test_monitoring_charts_show_the_calls(console):
    """Usage reaches the database after its minute ends (flushed every 15 s)."""
    page = console.page()
    page.goto(f"{console.url}/services/{LLM_SERVICE}/#monitoring")
    page.wait_for_selector("#charts [data-chart=rps] svg")
    deadline = time.monotonic() + 150
    while not page.query_selector("#charts [data-chart=rps] polyline"):
        assert time.monotonic() < deadline, "no usage reached the charts"
        page.wait_for_timeout(3000)
        page.click("#charts-refresh")
    with console.system.api() as api:
        usage = api.get("/usage", params={"service": LLM_SERVICE, "group": "minute"}).json()
    # Latency and time to first token are drawn when the gateway counts them (contracts.usage
    # KINDS); a chart with nothing to draw says so instead of drawing a flat line.
    fields = {"rps": "requests", "tps": "completion_tokens", "latency": "avg_latency_ms",
              "ttft": "avg_ttft_ms"}  # fmt: skip
    for chart, field in fields.items():
        drawn = page.query_selector(
            f"#charts [data-chart={chart}] polyline, #charts [data-chart={chart}] circle"
        )
        if any(point[field] for point in usage["series"]):
            assert drawn, f"the {chart} chart is empty; usage: {usage['series']}"
        else:
            assert page.query_selector(f"#charts [data-chart={chart}] text.empty")
    assert any(p["requests"] for p in usage["series"])
    console.shot(page, "13-service-monitoring")
    page.close()


def row(page, name: str):
    return page.locator(f'#services tr[data-service="{name}"]')


def test_services_list_scales_stops_and_deletes(console):
    page = console.page()
    page.goto(console.url + "/")
    row(page, LLM_SERVICE).locator(".badge.running").wait_for()
    row(page, JSON_SERVICE).locator(".badge.running").wait_for()
    assert "vllm-cpu" in row(page, LLM_SERVICE).inner_text()
    assert "custom" in row(page, JSON_SERVICE).inner_text()
    console.shot(page, "14-services")

    row(page, JSON_SERVICE).locator("button:has-text('Scale')").click()
    page.fill("dialog input[name=value]", "2")
    console.shot(page, "15-scale-dialog", full_page=False)
    page.click("dialog button[data-role=ok]")
    row(page, JSON_SERVICE).locator("td.instances:has-text('2/2')").wait_for(timeout=120_000)

    row(page, LLM_SERVICE).locator("button:has-text('Stop')").click()
    row(page, LLM_SERVICE).locator(".badge.stopped").wait_for(timeout=120_000)
    page.select_option("#phase-filter", "stopped")
    page.wait_for_function("document.querySelectorAll('#services tr[data-service]').length === 1")
    assert row(page, LLM_SERVICE).count() == 1
    page.select_option("#phase-filter", "")
    row(page, JSON_SERVICE).wait_for()

    for name in (LLM_SERVICE, JSON_SERVICE):
        row(page, name).locator("button:has-text('Delete')").click()
        page.wait_for_selector(f"dialog[open] h2:has-text('Delete {name}?')")
        if name == LLM_SERVICE:
            console.shot(page, "16-delete-confirm", full_page=False)
        page.click("dialog button[data-role=ok]")
    for name in (LLM_SERVICE, JSON_SERVICE):
        row(page, name).wait_for(state="detached", timeout=120_000)
    with console.system.api() as api:
        assert [s["name"] for s in api.get("/services").json()] == []
    page.close()


def test_api_refuses_writes_without_the_csrf_token(console):
    """The console's session may write only with its CSRF token (DRF SessionAuthentication)."""
    page = console.page()
    page.goto(console.url + "/")
    status = page.evaluate("""async () => (await fetch('/api/v1/services', {
        method: 'POST', credentials: 'same-origin',
        headers: {'Content-Type': 'application/json'},
        body: JSON.stringify({name: 'no-csrf', llm: {engine: 'vllm-cpu', model: 'tiny-llama'}}),
    })).status""")
    assert status == 403
    assert json.loads(page.evaluate("JSON.stringify(document.cookie.includes('csrftoken'))"))
    page.close()


def test_nodes_page_shows_this_node_and_cordons_it(console):
    page = console.page()
    page.goto(console.url + "/nodes/")
    node = page.wait_for_selector("#nodes tbody tr[data-node]")
    assert node.query_selector("td.state .badge").inner_text() == "ready"
    console.shot(page, "12-nodes")
    node.query_selector("button:has-text('Cordon')").click()
    page.wait_for_selector("#nodes td.state .badge:has-text('cordoned')")
    page.click("#nodes button:has-text('Uncordon')")  # leave the node as the other tests need it
    page.wait_for_selector("#nodes td.state .badge:has-text('ready')")
    page.close()
