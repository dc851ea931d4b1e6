"""The REST API as `wharf` calls it: one httpx client, answers as JSON, and every failure an
error with an exit code scripts can trust (see EXIT_CODES)."""

from __future__ import annotations

from typing import Any

import click
import httpx

from wharfcli.config import Config

EXIT_CODES = """Exit codes: 0 done; 1 refused or failed (the reason is printed); 2 bad usage;
3 not signed in or not allowed; 4 not found; 5 the API or gateway cannot be reached;
6 --wait gave up before the service settled."""

FAILED, USAGE, DENIED, NOT_FOUND, UNREACHABLE, TIMED_OUT = 1, 2, 3, 4, 5, 6
TIMEOUT_S = 30.0
MAX_PAGES = 1000  # pages of one list a command reads at most


class CliError(click.ClickException):
    def __init__(self, message: str, exit_code: int = FAILED) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click exits with it


def describe_refusal(response: httpx.Response) -> str:
    """The API's `detail` and every field error, one per line, field first."""
    try:
        body = response.json()
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:500]}"
    if not isinstance(body, dict):
        return f"HTTP {response.status_code}: {body}"
    lines = []
    detail = body.get("detail") or body.get("error")
    if isinstance(detail, dict):  # the gateway's OpenAI-shaped error
        detail = detail.get("message")
    if detail:
        lines.append(str(detail))
    errors = body.get("errors")
    if not isinstance(errors, dict) and not detail:
        errors = body  # DRF's plain {field: [messages]}
    for field, messages in (errors or {}).items():
        for message in messages if isinstance(messages, list) else [messages]:
            lines.append(f"  {field}: {message}")
    return "\n".join(lines) or f"HTTP {response.status_code}"


def exit_code_for(status: int) -> int:
    if status in (401, 403):
        return DENIED
    if status == 404:
        return NOT_FOUND
    return FAILED


class Client:
    def __init__(self, config: Config, login_hint: str = "", auth: httpx.Auth | None = None):
        """`auth`: how requests are signed instead of the config's token (eascmd's access
        key pair)."""
        self.config = config
        self.api, token = config.effective()
        # what to do about a 401: `wharf login`, or eascmd's `config`
        self.login_hint = login_hint or (
            f"sign in with `wharf login --api {self.api} --token TOKEN` (or set WHARF_TOKEN)"
        )
        headers = {"Authorization": f"Bearer {token}"} if token and auth is None else {}
        self.http = httpx.Client(base_url=self.api, headers=headers, timeout=TIMEOUT_S,
                                 auth=auth)  # fmt: skip

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """The answer's JSON (None for an empty answer); CliError for anything but a 2xx."""
        response = self._send(method, "/api/v1/" + path.lstrip("/"), **kwargs)
        return response.json() if response.content else None

    def _send(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, url, **kwargs)
        except httpx.TimeoutException:
            raise CliError(f"{self.api} did not answer in {TIMEOUT_S:.0f} s", UNREACHABLE) from None
        except httpx.TransportError as exc:
            raise CliError(
                f"cannot reach the Wharf API at {self.api}: {exc}", UNREACHABLE
            ) from None
        if response.status_code == 401:
            raise CliError(f"{describe_refusal(response)}\n{self.login_hint}", DENIED)
        if not response.is_success:
            raise CliError(describe_refusal(response), exit_code_for(response.status_code))
        return response

    def get(self, path: str, **params: Any) -> Any:
        """The answer's JSON; a list the API pages (Link: rel="next", controlplane.paging)
        read to its end."""
        wanted = {k: v for k, v in params.items() if v is not None}
        response = self._send("GET", "/api/v1/" + path.lstrip("/"), params=wanted)
        data = response.json() if response.content else None
        for _ in range(MAX_PAGES):
            following = response.links.get("next", {}).get("url")
            if not isinstance(data, list) or not following:
                break
            response = self._send("GET", following)
            data += response.json()
        return data

    def post(self, path: str, body: Any = None) -> Any:
        return self.call("POST", path, json=body)
