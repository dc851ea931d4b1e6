"""ModelScope (`modelscope://org/name[@revision]`) for workers.models.hub, through its official
light client, modelscope_hub (PyPI `modelscope-hub`): `HubApi.list_repo_revisions` (a branch or tag
to its CommitId, which also tells a repository that is not there), `HubApi.list_repo_files(revision=
<commit>, recursive=False)` (the top level, with sizes and sha256), then per serving file
`HubApi.downloader.download_file(revision=<commit>, local_dir=<partial folder>, file_size=,
expected_sha256=, progress_callbacks=)`.

Per client object, no process-wide setting: each stage (and each `resolve`) builds its own
`HubApi(config=_Config(endpoint, token=...))`. The token is explicit, "" when none (the client
then sends neither Authorization header nor m_session_id cookie), so MODELSCOPE_API_TOKEN and a
login stored by its CLI (~/.modelscope/credentials, MODELSCOPE_HOME) are never read; the endpoint
is explicit, so MODELSCOPE_ENDPOINT / MODELSCOPE_DOMAIN are not read either. A token goes as both,
the cookie for the endpoint's host only: neither follows a redirect to the storage's CDN.
`_Config` also keeps the client off the disk outside the cache root (HubConfig would write a
session id under ~/.modelscope/credentials, for its User-Agent): its folders are /dev/null, and
its file locks go to `<partial>/.cache/modelscope/.lock/` (removed once the folder is complete).
Its other MODELSCOPE_* tunables (timeouts, retries, chunk size, file lock) still apply.

Process-wide, this module turns off the client's progress bars (a tqdm on stderr; ours forwards
bytes to `progress`), sends its logs (its own stderr handler, not propagated) to logging, and keeps
its ranged parallel download off (MODELSCOPE_DOWNLOAD_PARALLEL_WORKERS > 1): those requests pass
the token as a cookie without a domain, which follows a redirect to the CDN. The client still asks
the endpoint once per stage whether it runs inside Alibaba Cloud (/api/v1/repos/
internalAccelerationInfo, 0.2 s) and, if so, asks for the internal storage route.

What resumes, to the byte: the client downloads into `<file>.incomplete` in the partial folder
and continues it with a Range request, within one call (its own retries, 5 by default) and in
workers.models.hub's next attempt or the next stage. A file already there (of its listed size and
sha256) is taken without a request. A file starts again from its first byte when the hub ignores
the Range (HTTP 200), answers 416, or the bytes fail the size or sha256 check.

Errors are ours, built from the kind of the client's exception and its HTTP status, never from
its text (which quotes the hub's answer). The client asks again itself (API calls 5 more times, a
listing page 3 more, a file 5 more), and workers.models.hub API_ATTEMPTS / DOWNLOAD_ATTEMPTS
times that.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from modelscope_hub import HubApi, HubConfig, ProgressCallback
from modelscope_hub import _download as ms_download
from modelscope_hub import errors as ms_errors
from tqdm import tqdm

from contracts.hub_refs import HubRef
from workers.models.hub import HubError, _FileProgress, _Hub, _Stage, _transient

setattr(ms_download, "tqdm", functools.partial(tqdm, disable=True))  # noqa: B010 (patched)
setattr(ms_download, "DOWNLOAD_PARALLELS", 1)  # noqa: B010
_LOG = logging.getLogger("modelscope_hub")
for _handler in list(_LOG.handlers):
    if type(_handler) is logging.StreamHandler:  # the one the client adds to stderr
        _LOG.removeHandler(_handler)
_LOG.propagate = True

_NOWHERE = Path(os.devnull)
_SESSION = uuid.uuid4().hex  # the client's User-Agent names one; not stored
_GAVE_UP = re.compile(r"too many (\d{3}) error responses")  # urllib3's, after its retries


class _Config(HubConfig):
    """The client's settings from Wharf alone: no stored login read, no session id written."""

    def load_token(self) -> str | None:
        return None

    def load_cookies(self) -> Any:
        return None

    def load_git_token(self) -> str | None:
        return None

    def get_session_id(self) -> str:
        return _SESSION


def _callback(progress: _FileProgress) -> type[ProgressCallback]:
    """What the client takes for progress (a class, one instance per file): bytes to `progress`,
    less when it starts a file again."""

    class Bytes(ProgressCallback):
        def update(self, size: int) -> None:
            progress.add(size)

    return Bytes


@dataclass(frozen=True)
class ModelScope(_Hub):
    """ModelScope, through modelscope_hub."""

    api: HubApi = field(repr=False)
    sha256: dict[str, str] = field(default_factory=dict, repr=False)  # by path, as listed

    @classmethod
    def open(cls, ref: HubRef, endpoint: str, token: str | None) -> ModelScope:
        config = _Config(endpoint, cache_dir=_NOWHERE, config_dir=_NOWHERE, token=token or "")
        api = HubApi(config=config)
        api.downloader  # noqa: B018 (built here, lazily it would be by each download thread)
        return cls(ref, endpoint, token, api)

    def error(self, exc: Exception, missing: str, file: str = "") -> HubError | None:
        """Ours for one of modelscope_hub's errors (None: not one about the hub); `missing`:
        what a 404 means (repo/revision/file); `file`: the one being fetched."""
        said = f"{self.ref.name}: {self.endpoint} answered{f' for {file}' if file else ''}"
        if isinstance(exc, ms_errors.FileIntegrityError):  # its size or sha256, after retries
            return HubError(f"{self.ref.name}: {file} came unlike its listing (size, sha256)")
        if isinstance(exc, ms_errors.NetworkError):  # no connection, timeouts, its deadlines
            return self.unreachable(type(exc).__name__.lstrip("_"), file)
        status = getattr(exc, "status_code", None) if isinstance(exc, ms_errors.APIError) else 0
        if status is None and (gave_up := _GAVE_UP.search(str(exc.__cause__))):
            status = int(gave_up[1])
        if isinstance(exc, (ms_errors.ServerError, ms_errors.RateLimitError)) or (
            status and _transient(status)
        ):
            return self.unreachable(f"HTTP {status or '5xx'}", file)
        if status == 404:
            return {"revision": self.no_revision, "file": self.no_file}.get(missing, self.no_repo)()
        if status in (401, 403):
            return self.no_access()
        if status:
            return HubError(f"{said} HTTP {status}")
        if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.InvalidSchema)):
            return HubError(f"cannot reach {self.endpoint}: not an http(s) URL")
        if isinstance(exc, (ms_errors.APIError, ValueError, KeyError, TypeError, AttributeError)):
            return HubError(f"{said} not as a hub does")
        if isinstance(exc, requests.RequestException):
            return self.unreachable(type(exc).__name__, file)
        return None  # a full disk, say: raised as it is

    def call(self, missing: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """`self.api.<method>(...)`, its errors as ours."""
        try:
            return getattr(self.api, method)(self.ref.repo, "model", *args, **kwargs)
        except Exception as exc:
            if (error := self.error(exc, missing)) is None:
                raise
            raise error from exc

    def listing(self, commit: str | None) -> tuple[str, dict[str, int]]:
        revision = commit or self.ref.revision
        refs = self.call("repo", "list_repo_revisions")
        refs = {e.get("Revision"): e.get("CommitId") for e in refs if isinstance(e, dict)}
        if commit is None and revision not in refs:
            raise self.no_revision(revision)
        sha = self.checked(commit or refs[revision])
        entries = self.call("revision", "list_repo_files", revision=sha, recursive=False)
        files = [entry for entry in entries if not entry.is_dir]
        self.sha256.update({f.path: f.sha256 for f in files if isinstance(f.sha256, str)})
        return sha, {f.path: f.size for f in files}

    def fetch(self, name: str, size: int, stage: _Stage, progress: _FileProgress) -> None:
        """`download_file` into the partial folder, checked against the listing's size and
        sha256 (which the client also uses to take a file there already)."""
        progress.set(0)
        try:
            self.api.downloader.download_file(
                self.ref.repo,
                "model",
                name,
                revision=stage.commit,
                cache_dir=stage.partial / ".cache" / "modelscope",
                local_dir=stage.partial,
                file_size=size,
                expected_sha256=self.sha256.get(name),
                progress_callbacks=[_callback(progress)],
            )
        except Exception as exc:
            progress.set(0)
            if (error := self.error(exc, "file", name)) is None:
                raise
            raise error from exc
