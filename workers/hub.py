"""Stage models from Hugging Face Hub (`hf://org/name[@revision]`) and ModelScope
(`modelscope://org/name[@revision]`) into `cache_root/<scheme>/<org>/<name>/<commit>/`, over their
HTTP APIs with httpx (no hub SDK: huggingface_hub reads HF_* and ~/.cache/huggingface). A commit
folder is built in `.<commit>.partial/` and renamed into place, so one that exists is complete; a
failed stage leaves it to the next, which continues it with Range requests (as a stage does when
a connection drops). Stagings of a commit serialise on `<commit>.lock`. The token goes to the
endpoint only (httpx drops it on a redirect to another host), never to a log, error or file."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from contracts.hub_refs import COMMIT as _COMMIT
from contracts.hub_refs import HubRef

log = logging.getLogger(__name__)

HF_ENDPOINT = "https://huggingface.co"
MODELSCOPE_ENDPOINT = "https://www.modelscope.cn"
MANIFEST = ".wharf-manifest.json"
DOWNLOAD_ATTEMPTS = 5  # per file and stage, each one continuing where the one before stopped
RETRY_DELAY = 2.0  # seconds before another attempt, times the attempts made
DOWNLOAD_WORKERS = 4  # files downloading at once
_TIMEOUT = httpx.Timeout(60.0, connect=10.0)
_FORMATS = ((".safetensors",), (".bin",), (".pt", ".pth"))  # weights, by preference
_WEIGHTS = tuple(suffix for suffixes in _FORMATS for suffix in suffixes)
_NOT_WEIGHTS = re.compile(r"(training_args|optimizer|scheduler|scaler|rng_state)")
_SMALL = (".json", ".model", ".tiktoken", ".jinja", ".py", "merges.txt", "vocab.txt")
_REFUSED = "the token given was refused or lacks access (of a gated model, accept its terms)"


class HubError(Exception):
    """Staging from a hub failed; the message says what to fix and never holds the token."""


def serving_files(paths: Iterable[str]) -> list[str]:
    """What serving needs of a repository's files, at its top level only: `*.json`, `*.model`,
    `*.tiktoken`, `*.jinja`, merges.txt, vocab.txt, `*.py` (a few KB; run only with
    trust_remote_code), and the weights in the first format present of safetensors, bin, pt/pth
    (Mistral's `consolidated*` only if alone; no optimizer states). No README, images, folders."""
    top = sorted(p for p in paths if "/" not in p and not p.startswith("."))
    weights = [p for p in top if p.endswith(_WEIGHTS) and not _NOT_WEIGHTS.match(p)]
    chosen = next((fmt for fmt in _FORMATS if any(p.endswith(fmt) for p in weights)), ())
    weights = [p for p in weights if p.endswith(chosen)]
    weights = [p for p in weights if not p.startswith("consolidated")] or weights
    index = [p for p in top if p.endswith(".index.json") and p[:-11].endswith(chosen)]
    small = [p for p in top if p.endswith(_SMALL) and not p.endswith(".index.json")]
    return sorted(small + index + weights)


@dataclass(frozen=True)
class _Hub:
    """A client for one repository on one hub."""

    ref: HubRef
    endpoint: str
    client: httpx.Client
    has_token: bool

    def fail(self, response: httpx.Response, missing: str) -> HubError:
        """The error for a failed answer; `missing`: what a bare 404 means (repo/revision/file)."""
        code, status = response.headers.get("X-Error-Code", ""), response.status_code
        name, where, bare_404 = self.ref.name, self.endpoint, status == 404 and not code
        if code == "RevisionNotFound" or (bare_404 and missing == "revision"):
            return HubError(f"{name}: has no revision '{self.ref.revision}' on {where}")
        if code == "EntryNotFound" or (bare_404 and missing == "file"):
            return HubError(f"{name}: a file listed at that commit is missing on {where}")
        if code == "RepoNotFound" or status == 404:
            why = "the token given has no access" if self.has_token else "no token was given"
            return HubError(f"{name}: no such repository on {where}, or it is private and {why}")
        if code == "GatedRepo" or status in (401, 403):
            why = _REFUSED if self.has_token else "none was given"
            return HubError(f"{name} needs an access token (llm.hub_token) with access: {why}")
        return HubError(f"{name}: {where} answered HTTP {status}")

    def api(self, path: str, missing: str, params: dict[str, str] | None = None) -> Any:
        """The JSON object at `endpoint + path` (of ModelScope's, its Data); else HubError."""
        try:
            response = self.client.get(self.endpoint + path, params=params)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise HubError(f"cannot reach {self.endpoint}: {exc}") from exc
        if not response.is_success:
            raise self.fail(response, missing)
        says = ""
        with contextlib.suppress(ValueError):
            body = response.json()
            if isinstance(body, dict) and (self.ref.scheme == "hf" or body.get("Code") == 200):
                return body if self.ref.scheme == "hf" else body.get("Data") or {}
            says = f" {body['Message']!r}" if isinstance(body, dict) and "Message" in body else ""
        raise HubError(f"{self.ref.name}: {self.endpoint} answered{says}, not as a hub does")

    def listing(self, commit: str | None) -> tuple[str, dict[str, int]]:
        """`commit` (default: the one the revision is at now) and its files' sizes by path."""
        repo, revision = self.ref.repo, commit or self.ref.revision
        if self.ref.scheme == "hf":  # blobs=true: the sizes too
            path = f"/api/models/{repo}/revision/{quote(revision, safe='')}"
            info = self.api(path, "revision", {"blobs": "true"})
            sha, entries = info.get("sha"), info.get("siblings") or []
        else:  # the revisions first: they also tell a repository that is not there
            refs = self.api(f"/api/v1/models/{repo}/revisions", "repo").get("RevisionMap") or {}
            refs = {e["Revision"]: e.get("CommitId") for k in refs for e in refs[k] or []}
            if commit is None and revision not in refs:
                raise HubError(f"{self.ref.name}: has no revision '{revision}' on {self.endpoint}")
            sha = commit or refs[revision]
        if not isinstance(sha, str) or not _COMMIT.fullmatch(sha):
            raise HubError(f"{self.ref.name}: {self.endpoint} did not say which commit it is at")
        if self.ref.scheme == "hf":
            return sha, {e["rfilename"]: e.get("size") or 0 for e in entries}
        query = {"Revision": sha, "Recursive": "True"}
        entries = self.api(f"/api/v1/models/{repo}/repo/files", "revision", query).get("Files")
        return sha, {e["Path"]: e.get("Size") or 0 for e in entries or [] if e["Type"] != "tree"}


@contextlib.contextmanager
def _hub(ref: HubRef, token: str | None, endpoint: str) -> Iterator[_Hub]:
    headers = {"User-Agent": "wharf"} | ({"Authorization": f"Bearer {token}"} if token else {})
    endpoint = endpoint.rstrip("/")
    with httpx.Client(headers=headers, timeout=_TIMEOUT, follow_redirects=True) as client:
        if token and ref.scheme == "modelscope":  # its older API reads the token as a cookie
            client.cookies.set("m_session_id", token, domain=httpx.URL(endpoint).host)
        yield _Hub(ref, endpoint, client, bool(token))


def resolve(ref: HubRef, token: str | None, endpoint: str) -> str:
    """The commit `ref.revision` points to now (a 40-hex revision is returned as it is)."""
    if _COMMIT.fullmatch(ref.revision):
        return ref.revision
    with _hub(ref, token, endpoint) as hub:
        return hub.listing(None)[0]


def _size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


def _complete(folder: Path) -> int | None:
    """The bytes in a complete commit folder (per its manifest); None if it is not complete."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        objects = json.loads((folder / MANIFEST).read_text())["objects"]
        if all(_size(folder / path) == int(o["size"]) for path, o in objects.items()):
            return sum(int(o["size"]) for o in objects.values())
    return None


class _Stage:
    """The building of one commit's folder: its downloads, and their progress."""

    def __init__(self, hub: _Hub, commit: str, folder: Path, report: Any, total: int) -> None:
        self.hub, self.commit, self.folder, self.report = hub, commit, folder, report
        self.total, self.done, self.reported, self.lock = total, 0, 0, threading.Lock()
        self.partial = folder.with_name(f".{commit}.partial")

    def add(self, amount: int) -> None:  # from download threads; reports ~100 times
        with self.lock:
            self.done += amount
            if self.report and self.done >= self.reported + max(1 << 20, self.total // 100):
                self.reported = self.done
                self.report(self.done, self.total)

    def build(self, files: dict[str, int]) -> None:
        """Download `files` into the partial folder, add the manifest, rename it into place."""
        shutil.rmtree(self.folder, ignore_errors=True)  # damaged since it was staged, if there
        self.partial.mkdir(exist_ok=True)
        log.info("staging %s@%s: %d bytes", self.hub.ref.name, self.commit, self.total)
        with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool:  # a failure cancels those not begun
            list(pool.map(self.download, files, files.values()))
        source = {"uri": f"{self.hub.ref.name}@{self.commit}", "endpoint": self.hub.endpoint}
        objects = {name: {"size": size} for name, size in files.items()}
        manifest = {"version": 1, "source": source, "objects": objects}
        (self.partial / MANIFEST).write_text(json.dumps(manifest, indent=1))
        os.rename(self.partial, self.folder)

    def download(self, name: str, size: int) -> None:
        """Fetch file `name` unless it is there, continuing what an earlier attempt or stage
        left with a Range request; check its size."""
        hub, target, part = self.hub, self.partial / name, self.partial / f"{name}.incomplete"
        self.add(min(_size(target) or _size(part), size))  # what earlier stages left
        url = f"{hub.endpoint}/{hub.ref.repo}/resolve/{self.commit}/{quote(name)}"
        query = {"Revision": self.commit, "FilePath": name} if hub.ref.scheme != "hf" else None
        url = f"{hub.endpoint}/api/v1/models/{hub.ref.repo}/repo" if query else url
        for attempt in range(1, DOWNLOAD_ATTEMPTS + 1):
            if target.exists() or (part.exists() and _size(part) >= size):
                break
            try:
                self.fetch(url, query, part)
            except httpx.HTTPError as exc:
                where = f"{name} of {hub.ref.name} stopped at {_size(part)} of {size} bytes ({exc})"
                if attempt == DOWNLOAD_ATTEMPTS:
                    raise HubError(f"cannot reach {hub.endpoint}: {where}; stage again") from exc
                log.warning("%s; continuing", where)
                time.sleep(RETRY_DELAY * attempt)
        if not target.exists() and (got := _size(part)) != size:
            self.add(-min(got, size))
            part.unlink()
            raise HubError(f"{hub.ref.name}: {name} came with {got} bytes, not {size}")
        if not target.exists():
            os.replace(part, target)

    def fetch(self, url: str, query: dict[str, str] | None, part: Path) -> None:
        """One GET of the rest of a file into `part`: a Range request when some of it is there."""
        have = _size(part)
        headers = {"Accept-Encoding": "identity"} | ({"Range": f"bytes={have}-"} if have else {})
        with self.hub.client.stream("GET", url, params=query, headers=headers) as response:
            if response.status_code >= 500 or response.status_code == 429:
                raise httpx.TransportError(f"HTTP {response.status_code}")  # worth another go
            if not response.is_success:
                raise self.hub.fail(response, "file")
            if have and response.status_code != 206:  # the whole file came: start over
                self.add(-have)
                have = 0
            with part.open("ab" if have else "wb") as out:
                for chunk in response.iter_bytes():
                    out.write(chunk)
                    self.add(len(chunk))
                os.fsync(out.fileno())


def stage_hub(
    ref: HubRef,
    cache_root: Path,
    *,
    token: str | None,
    endpoint: str,
    commit: str | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[Path, str]:
    """Stage the serving files of `commit` (default: the one `ref.revision` is at now) into
    `cache_root/<scheme>/<org>/<name>/<commit>`; return (that folder, the commit). A complete
    folder is returned as it is (with a known commit, without a request); a stager of the same
    commit is waited for. `progress(bytes_done, bytes_total)` is called from download threads
    as bytes arrive, and with the total at the end. Raises HubError."""
    if commit is not None and not _COMMIT.fullmatch(commit):
        raise ValueError(f"{commit!r} is not a 40-hex commit")
    repo_dir = Path(cache_root) / ref.scheme / ref.repo
    commit = commit or (ref.revision if _COMMIT.fullmatch(ref.revision) else None)
    total = _complete(repo_dir / commit) if commit else None
    if total is None or commit is None:
        with _hub(ref, token, endpoint) as hub:
            commit, listing = hub.listing(commit)
            files = {name: listing[name] for name in serving_files(listing)}
            if not any(name.endswith(_WEIGHTS) for name in files):
                raise HubError(f"{ref.name}@{commit}: no model weights at the repository's top")
            total = sum(files.values())
            try:
                repo_dir.mkdir(parents=True, exist_ok=True)
                with (repo_dir / f"{commit}.lock").open("a") as lock:  # the lock file stays
                    fcntl.flock(lock, fcntl.LOCK_EX)
                    if _complete(repo_dir / commit) is None:
                        _Stage(hub, commit, repo_dir / commit, progress, total).build(files)
            except OSError as exc:
                raise HubError(f"cannot write {repo_dir}: {exc}") from exc
    if progress:
        progress(total, total)
    log.info("staged %s@%s into %s", ref.name, commit, repo_dir / commit)
    return repo_dir / commit, commit
