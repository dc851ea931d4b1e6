"""Reading and driving the console's deploy page (frontend/templates/frontend/deploy.html) from
Playwright: the run command preview, the spec it shows, and the JSON editor (Monaco, or the
plain text area it falls back to)."""

from __future__ import annotations

import json
import time

# The JSON editor's Monaco model (frontend/static/frontend/json_editor.js MODEL_URI).
EDITOR_MODEL = "monaco.editor.getModel(monaco.Uri.parse('inmemory://wharf/spec.json'))"


def open_deploy(page, url: str, tab: str = "llm", editor: str | None = None) -> None:
    """The deploy page on `tab`, once it is drawn from the schema and its JSON editor is up
    (`editor`: "monaco" or "text" to insist on one)."""
    page.goto(f"{url}/deploy/#{tab}")
    ready = page.wait_for_selector("body[data-deploy-ready]")
    if editor:
        assert ready.get_attribute("data-deploy-ready") == editor


def preview_text(page) -> str:
    return page.inner_text("#preview-command")


def wait_preview(page, check, timeout: float = 15) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = preview_text(page)
        if check(text):
            return text
        page.wait_for_timeout(200)
    raise AssertionError(f"the preview never matched; it shows:\n{preview_text(page)}")


def shown_spec(page) -> dict:
    """The spec the preview says deploys."""
    return json.loads(page.inner_text("#preview-spec"))


def upload_json(page, text: str) -> None:
    """Puts `text` in the JSON editor the way a user can: Upload JSON."""
    payload = {"name": "spec.json", "mimeType": "application/json", "buffer": text.encode()}
    page.set_input_files("#json-file", files=[payload])


def editor_text(page) -> str:
    return page.evaluate(f"() => {EDITOR_MODEL}.getValue()")


def deploy(page, name: str) -> None:
    """Deploy, take the token dialog, and land on the service's page."""
    page.click("#deploy")
    token = page.wait_for_selector("#created-token").inner_text()
    assert token.startswith("wsk-")
    page.click("dialog button[data-role=open]")
    page.wait_for_url(f"**/services/{name}/")
