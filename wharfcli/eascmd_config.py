"""Where `eascmd config` keeps its access key and endpoint: `~/.eas/config` as eascmd has it
(`$EASCMD_CONFIG_DIR/config` when set; `-c FILE` another file), 0600, INI:

    [eas]
    access_id = ops
    access_key = wat-…
    endpoint = http://127.0.0.1:8000

`-i AccessKeyId -k AccessKeySecret` is a Wharf access key pair (`manage.py create_access_key`,
`wharf access-keys create`): each request is signed with it (wharfcli.acs_auth). A Wharf API
token (`wat-…`) as `-k` is sent as `Authorization: Bearer` instead, `-i` then only its name.
The endpoint (`-e`) is Wharf's API address.
"""

from __future__ import annotations

import configparser
import os
from dataclasses import dataclass
from pathlib import Path

from wharfcli.acs_auth import AccessKeyAuth
from wharfcli.client import DENIED, USAGE, CliError
from wharfcli.config import Config

API_TOKEN_PREFIX = "wat-"  # a Wharf API token's (contracts.tokens), sent as a Bearer token

SECTION = "eas"


def default_path() -> Path:
    folder = os.environ.get("EASCMD_CONFIG_DIR")
    return Path(folder) / "config" if folder else Path.home() / ".eas" / "config"


def normalise_endpoint(endpoint: str) -> str:
    """`host:port` → `http://host:port`; a URL as given, less a trailing slash."""
    endpoint = endpoint.strip().rstrip("/")
    if not endpoint:
        return ""
    return endpoint if "://" in endpoint else f"http://{endpoint}"


@dataclass
class Profile:
    access_id: str = ""
    access_key: str = ""
    endpoint: str = ""

    @classmethod
    def load(cls, path: Path) -> Profile:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(path.read_text())
        except FileNotFoundError:
            return cls()
        except (OSError, UnicodeDecodeError, configparser.Error) as exc:
            raise CliError(f"cannot read {path}: {exc}", USAGE) from None
        section = parser[SECTION] if parser.has_section(SECTION) else {}
        return cls(
            access_id=section.get("access_id", ""),
            access_key=section.get("access_key", ""),
            endpoint=section.get("endpoint", ""),
        )

    def save(self, path: Path) -> None:
        """Written whole to a 0600 file beside the old one, then moved over it."""
        parser = configparser.ConfigParser(interpolation=None)
        parser[SECTION] = {"access_id": self.access_id, "access_key": self.access_key,
                           "endpoint": self.endpoint}  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        partial = path.with_name(path.name + ".partial")
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            parser.write(out)
        os.chmod(partial, 0o600)
        os.replace(partial, path)

    def overridden(self, access_id: str | None, access_key: str | None, endpoint: str | None):
        """This profile with what the command line gave (`-i -k -e` before the verb)."""
        return Profile(
            access_id=self.access_id if access_id is None else access_id,
            access_key=self.access_key if access_key is None else access_key,
            endpoint=self.endpoint if endpoint is None else normalise_endpoint(endpoint),
        )

    def client_config(self, path: Path) -> Config:
        """What wharfcli.client.Client takes; an error naming the fix when something lacks."""
        if not self.endpoint or not self.access_key:
            lacks = "endpoint (-e)" if not self.endpoint else "access key (-k)"
            raise CliError(
                f"no {lacks} in {path}: run `eascmd config -i AccessKeyId -k AccessKeySecret "
                "-e HOST:PORT`", DENIED,
            )  # fmt: skip
        if self.signer() is not None:
            return FixedConfig(api=self.endpoint, token="")
        return FixedConfig(api=self.endpoint, token=self.access_key)

    def signer(self) -> AccessKeyAuth | None:
        """The access key pair that signs each request; None when `-k` is a Wharf API token
        (sent as a Bearer token, `-i` then only its name)."""
        if self.access_key.startswith(API_TOKEN_PREFIX) or not self.access_id:
            return None
        return AccessKeyAuth(self.access_id, self.access_key)


class FixedConfig(Config):
    """A wharfcli Config whose address and token are what eascmd was given, never `wharf`'s
    environment overrides (WHARF_API, WHARF_TOKEN)."""

    def effective(self) -> tuple[str, str]:
        return self.api.rstrip("/"), self.token
