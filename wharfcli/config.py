"""Where `wharf` keeps what `wharf login` was told, and the service tokens it has been shown.

One JSON file in the user's config directory (click.get_app_dir: ~/.config/wharf on Linux,
or $WHARF_CONFIG_DIR), readable by its owner alone (0600): it holds tokens. `WHARF_API` and
`WHARF_TOKEN` override what the file says, for scripts and CI.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import click

DEFAULT_API = "http://127.0.0.1:8000"


class ConfigError(click.ClickException):
    exit_code = 2


def config_path() -> Path:
    folder = os.environ.get("WHARF_CONFIG_DIR") or click.get_app_dir("wharf")
    return Path(folder) / "config.json"


@dataclass
class Config:
    api: str = DEFAULT_API
    token: str = ""
    # service tokens shown at create or rotate, by API then service name
    service_tokens: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def load(cls) -> Config:
        path = config_path()
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read {path}: {exc}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"{path} is not a JSON object; run `wharf login` again")
        return cls(
            api=str(data.get("api") or DEFAULT_API),
            token=str(data.get("token") or ""),
            service_tokens=dict(data.get("service_tokens") or {}),
        )

    def save(self) -> Path:
        """Written whole to a 0600 file beside the old one, then moved over it."""
        path = config_path()
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        body = {"api": self.api, "token": self.token, "service_tokens": self.service_tokens}
        partial = path.with_suffix(".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(body, out, indent=2)
        os.chmod(partial, 0o600)  # an older partial file may have had another mode
        os.replace(partial, path)
        return path

    def effective(self) -> tuple[str, str]:
        """(API URL, token): the environment's, else the file's."""
        api = os.environ.get("WHARF_API") or self.api
        token = os.environ.get("WHARF_TOKEN") or self.token
        return api.rstrip("/"), token

    def service_token(self, service: str) -> str:
        return self.service_tokens.get(self.effective()[0], {}).get(service, "")

    def remember_service_token(self, service: str, token: str) -> None:
        self.service_tokens.setdefault(self.effective()[0], {})[service] = token
        self.save()

    def forget_service_token(self, service: str) -> None:
        if self.service_tokens.get(self.effective()[0], {}).pop(service, None) is not None:
            self.save()
