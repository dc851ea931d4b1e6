"""Stage models from Hugging Face Hub (`hf://org/name[@revision]`) and ModelScope
(`modelscope://org/name[@revision]`) into `cache_root/<scheme>/<org>/<name>/<commit>/`: the serving
files only (`serving_files`). A commit folder is built in `.<commit>.partial/` and renamed into
place with its `.wharf-manifest.json`, so one that exists is complete (and, at a known commit, is
served without any request); stagings of a commit serialise on `<commit>.lock`.

Hugging Face goes through its official client, huggingface_hub: `HfApi.model_info(files_metadata=
True)` for the commit and the files' sizes, then `hf_hub_download(local_dir=<partial folder>)` per
file, at the commit. Wharf passes the endpoint and the token explicitly, `token=False` when it has
none, so HF_ENDPOINT, HF_TOKEN and a token stored by `hf auth login` are never used. The client
keeps its bookkeeping in `<partial>/.cache/huggingface/` (removed once the folder is complete), and
`cache_dir` points there too, so ~/.cache/huggingface (HF_HOME) is neither read nor written. It
reads its other HF_* variables once, at import; this module turns off, for the whole process, its
telemetry (an agent registry fetched from huggingface.co whatever the endpoint, and cached under
HF_HOME) and Xet (hf_xet keeps a chunk cache and logs under HF_HOME): files come over plain HTTP
from /resolve or its CDN. HF_HUB_OFFLINE still blocks it (a HubError says so); HF_HUB_ETAG_TIMEOUT
and HF_HUB_DOWNLOAD_TIMEOUT still apply. It prints no progress bar (ours is a tqdm that forwards
bytes to `progress`); its warnings go to logging.

What resumes, for Hugging Face: across stages, whole files. A file a stage finished stays in the
partial folder and the next stage takes it without a request. Within one `hf_hub_download` call, a
connection that drops mid-file is continued with a Range request from its last whole chunk (10
MiB), while bytes keep coming; but a file that call gives up on (an HTTP error, or the process
dies) starts again from its first byte: the client writes into a temporary file of its own,
deleted on failure (after a crash, left until the folder is complete).

ModelScope goes through its official client, modelscope_hub (workers.models.hub_modelscope, which
says how), and resumes to the byte: `<file>.incomplete` is continued with Range requests, by the
client's own retries, the next attempt or the next stage.

HubUnreachable (a HubError) means: try again later (no connection, timeouts, HTTP 5xx/408/429 after
the retries); any other HubError needs a change (the reference, the token, access to the model).
The token goes to the endpoint only (not to a CDN it redirects to), never to a log, error, file."""

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx2
from huggingface_hub import HfApi, hf_hub_download
from huggingface_hub import constants as hf_constants
from huggingface_hub import errors as hf_errors
from tqdm import tqdm

from contracts.hub_refs import COMMIT as _COMMIT
from contracts.hub_refs import ENDPOINTS, HubRef

log = logging.getLogger(__name__)

hf_constants.HF_HUB_DISABLE_TELEMETRY = True  # read when called, not only at import
hf_constants.HF_HUB_DISABLE_XET = True

HF_ENDPOINT = ENDPOINTS["hf"]
MODELSCOPE_ENDPOINT = ENDPOINTS["modelscope"]
MANIFEST = ".wharf-manifest.json"
DOWNLOAD_ATTEMPTS = 5  # per file and stage
API_ATTEMPTS = 3  # per metadata request
RETRY_DELAY = 2.0  # seconds before another attempt, times the attempts made
DOWNLOAD_WORKERS = 4  # files downloading at once
_FORMATS = ((".safetensors",), (".bin",), (".pt", ".pth"))  # weights, by preference
_WEIGHTS = tuple(suffix for suffixes in _FORMATS for suffix in suffixes)
_NOT_WEIGHTS = re.compile(r"(training_args|optimizer|scheduler|scaler|rng_state)")
_SMALL = (".json", ".model", ".tiktoken", ".jinja", ".py", "merges.txt", "vocab.txt")
_REFUSED = "the token given was refused or lacks access (of a gated model, accept its terms)"
_T = TypeVar("_T")


class HubError(Exception):
    """Staging from a hub failed; the message says what to fix and never holds the token."""


class HubUnreachable(HubError):  # noqa: N818 (the name the callers know)
    """The hub could not be reached, timed out or was in trouble (HTTP 5xx/408/429) after the
    retries: back off and stage again; nothing needs to change."""


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


def _transient(status: int) -> bool:
    return status >= 500 or status in (408, 429)


def _again(call: Callable[[], _T], attempts: int) -> _T:
    """`call()`, made again after a pause while it raises HubUnreachable: `attempts` in all."""
    attempt = 1
    while True:
        try:
            return call()
        except HubUnreachable as exc:
            if attempt >= attempts:
                raise
            log.warning("%s; trying again", exc)
            time.sleep(RETRY_DELAY * attempt)
            attempt += 1


class _FileProgress:
    """The bytes of one file counted in a stage's progress."""

    def __init__(self, stage: _Stage) -> None:
        self.stage, self.count = stage, 0

    def add(self, amount: int) -> None:
        self.count += amount
        self.stage.add(amount)

    def set(self, count: int) -> None:
        self.add(count - self.count)


class _Bar(tqdm):  # type: ignore[misc]  # tqdm has no types
    """What huggingface_hub takes for a progress bar: shows nothing, forwards bytes to `sink`."""

    sink: Callable[[int], None]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **(kwargs | {"disable": True}))

    def update(self, n: float | None = 1) -> bool | None:
        self.sink(int(n or 0))
        return None


@dataclass(frozen=True)
class _Hub:
    """One repository on one hub: its listing, and the download of one of its files."""

    ref: HubRef
    endpoint: str
    token: str | None = field(repr=False)

    def no_repo(self) -> HubError:
        why = "the token given has no access" if self.token else "no token was given"
        return HubError(
            f"{self.ref.name}: no such repository on {self.endpoint}, or it is private and {why}"
        )

    def no_access(self) -> HubError:
        why = _REFUSED if self.token else "none was given"
        return HubError(f"{self.ref.name} needs an access token (llm.hub_token) with access: {why}")

    def no_revision(self, revision: str | None = None) -> HubError:
        revision = revision or self.ref.revision
        return HubError(f"{self.ref.name}: has no revision '{revision}' on {self.endpoint}")

    def no_file(self) -> HubError:
        return HubError(
            f"{self.ref.name}: a file listed at that commit is missing on {self.endpoint}"
        )

    def unreachable(self, why: str, file: str = "") -> HubUnreachable:
        what = f"{file} of {self.ref.name} ({why})" if file else why
        return HubUnreachable(f"cannot reach {self.endpoint}: {what}")

    def checked(self, sha: object) -> str:
        if not isinstance(sha, str) or not _COMMIT.fullmatch(sha):
            raise HubError(f"{self.ref.name}: {self.endpoint} did not say which commit it is at")
        return sha

    def listing(self, commit: str | None) -> tuple[str, dict[str, int]]:
        """`commit` (default: the one the revision is at now) and its files' sizes by path."""
        raise NotImplementedError

    def fetch(self, name: str, size: int, stage: _Stage, progress: _FileProgress) -> None:
        """One attempt at file `name` into the stage's partial folder; HubError if it fails."""
        raise NotImplementedError


@dataclass(frozen=True)
class _HuggingFace(_Hub):
    """Hugging Face Hub, through huggingface_hub."""

    def error(self, exc: Exception, file: str = "") -> HubError | None:
        """Ours for one of huggingface_hub's errors (None: not one it raises for a hub's answer),
        built here, not from the client's text; `file`: the one being fetched."""
        while isinstance(exc, hf_errors.LocalEntryNotFoundError) and exc.__cause__:
            if not isinstance(cause := exc.__cause__, Exception):
                break
            exc = cause  # why the file is neither on the hub nor here
        for_file = f" for {file}" if file else ""
        if isinstance(exc, hf_errors.OfflineModeIsEnabled):
            return HubError(f"{self.ref.name}: HF_HUB_OFFLINE is set on this node; unset it")
        if isinstance(exc, hf_errors.GatedRepoError):  # a RepositoryNotFoundError too
            return self.no_access()
        if isinstance(exc, hf_errors.RepositoryNotFoundError):
            return self.no_repo()
        if isinstance(exc, hf_errors.RevisionNotFoundError):
            return self.no_revision()
        if isinstance(exc, hf_errors.EntryNotFoundError):
            return self.no_file()
        if isinstance(exc, hf_errors.HfHubHTTPError):
            status = exc.response.status_code
            if _transient(status):
                return self.unreachable(f"HTTP {status}", file)
            if status in (401, 403):
                return self.no_access()
            return HubError(f"{self.ref.name}: {self.endpoint} answered HTTP {status}{for_file}")
        if isinstance(exc, httpx2.UnsupportedProtocol):
            return HubError(f"cannot reach {self.endpoint}: not an http(s) URL")
        if isinstance(exc, httpx2.TransportError):
            return self.unreachable(f"{type(exc).__name__}: {exc}", file)
        if isinstance(exc, hf_errors.FileMetadataError):
            return HubError(
                f"{self.ref.name}: {self.endpoint} answered{for_file} not as a hub does"
            )
        if isinstance(exc, OSError) and exc.errno is None and file:  # fewer bytes than promised
            return self.unreachable("it came short", file)
        return None  # a full disk, say: raised as it is

    def listing(self, commit: str | None) -> tuple[str, dict[str, int]]:
        api = HfApi(endpoint=self.endpoint, token=self.token or False)
        revision = commit or self.ref.revision
        try:
            info = api.model_info(self.ref.repo, revision=revision, files_metadata=True, timeout=60)
        except Exception as exc:
            if (error := self.error(exc)) is None:
                raise
            raise error from exc
        sha = self.checked(info.sha)
        return sha, {s.rfilename: s.size or 0 for s in info.siblings or []}

    def fetch(self, name: str, size: int, stage: _Stage, progress: _FileProgress) -> None:
        """`hf_hub_download`: a file there already (at this commit, by its metadata) is taken
        without a request; one that the call does not finish is gone."""
        progress.set(0)
        bar = type("_FileBar", (_Bar,), {"sink": staticmethod(progress.add)})
        try:
            hf_hub_download(
                self.ref.repo,
                name,
                revision=stage.commit,
                local_dir=stage.partial,
                cache_dir=stage.partial / ".cache" / "huggingface",
                endpoint=self.endpoint,
                token=self.token or False,
                tqdm_class=bar,
            )
        except Exception as exc:
            progress.set(0)
            if (error := self.error(exc, name)) is None:
                raise
            raise error from exc
        if (got := _size(stage.partial / name)) != size:
            progress.set(0)
            (stage.partial / name).unlink()
            raise HubError(f"{self.ref.name}: {name} came with {got} bytes, not {size}")


@contextlib.contextmanager
def _hub(ref: HubRef, token: str | None, endpoint: str) -> Iterator[_Hub]:
    endpoint = endpoint.rstrip("/")
    if ref.scheme == "hf":
        yield _HuggingFace(ref, endpoint, token)
        return
    from workers.models.hub_modelscope import ModelScope  # it builds on this module

    yield ModelScope.open(ref, endpoint, token)


def _listing(hub: _Hub, commit: str | None) -> tuple[str, dict[str, int]]:
    return _again(lambda: hub.listing(commit), API_ATTEMPTS)


def resolve(ref: HubRef, token: str | None, endpoint: str) -> str:
    """The commit `ref.revision` points to now (a 40-hex revision is returned as it is)."""
    if _COMMIT.fullmatch(ref.revision):
        return ref.revision
    with _hub(ref, token, endpoint) as hub:
        return _listing(hub, None)[0]


def check_access(
    ref: HubRef, token: str | None, endpoint: str, commit: str, repo_dir: Path, requester: str
) -> None:
    """Raise HubError unless the hub lets `requester`'s `token` read `commit` now: a commit
    staged for one workspace (a private repository, its token) is no other workspace's to
    reuse without its own access. Should the hub be unreachable, a requester it let in
    before keeps the copy it was shown (a hub down leaves what runs); a new one waits
    (HubUnreachable: retried)."""
    try:
        with _hub(ref, token, endpoint) as hub:
            _listing(hub, commit)
    except HubUnreachable:
        if (repo_dir / f"{commit}.access-{requester}").exists():
            log.info("%s@%s: the hub is unreachable; %s was let in before", ref.name, commit,
                     requester)  # fmt: skip
            return
        raise
    _let_in(repo_dir, commit, requester)


def _let_in(repo_dir: Path, commit: str, requester: str) -> None:
    """Remember that the hub let `requester` read `commit` (check_access's fallback)."""
    if requester:
        with contextlib.suppress(OSError):  # a read-only cache still serves; it asks again
            (repo_dir / f"{commit}.access-{requester}").touch()


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
        """Download `files` into the partial folder, drop anything else there (the client's
        bookkeeping, leftovers), add the manifest, rename it into place."""
        shutil.rmtree(self.folder, ignore_errors=True)  # damaged since it was staged, if there
        self.partial.mkdir(exist_ok=True)
        log.info("staging %s@%s: %d bytes", self.hub.ref.name, self.commit, self.total)
        with ThreadPoolExecutor(DOWNLOAD_WORKERS) as pool:  # a failure cancels those not begun
            list(pool.map(self.download, files, files.values()))
        for entry in self.partial.iterdir():
            if entry.is_dir():
                shutil.rmtree(entry)
            elif entry.name not in files:
                entry.unlink()
        source = {"uri": f"{self.hub.ref.name}@{self.commit}", "endpoint": self.hub.endpoint}
        objects = {name: {"size": size} for name, size in files.items()}
        manifest = {"version": 1, "source": source, "objects": objects}
        (self.partial / MANIFEST).write_text(json.dumps(manifest, indent=1))
        os.rename(self.partial, self.folder)

    def download(self, name: str, size: int) -> None:
        """File `name`, in up to DOWNLOAD_ATTEMPTS attempts while the hub is unreachable."""
        progress = _FileProgress(self)
        _again(lambda: self.hub.fetch(name, size, self, progress), DOWNLOAD_ATTEMPTS)
        progress.set(size)


def stage_hub(
    ref: HubRef,
    cache_root: Path,
    *,
    token: str | None,
    endpoint: str,
    commit: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    requester: str = "",
) -> tuple[Path, str]:
    """Stage the serving files of `commit` (default: the one `ref.revision` is at now) into
    `cache_root/<scheme>/<org>/<name>/<commit>`; return (that folder, the commit). A complete
    folder is reused: for a `requester` (a workspace) once the hub has said, on this reuse,
    that its own `token` reaches the commit (check_access); without one (a pod's own
    staging) as it is, with no request. A stager of the same commit is waited for.
    `progress(bytes_done, bytes_total)` is called from download threads as bytes arrive, and
    with the total at the end. Raises HubError (HubUnreachable: retry)."""
    if commit is not None and not _COMMIT.fullmatch(commit):
        raise ValueError(f"{commit!r} is not a 40-hex commit")
    repo_dir = Path(cache_root) / ref.scheme / ref.repo
    commit = commit or (ref.revision if _COMMIT.fullmatch(ref.revision) else None)
    total = _complete(repo_dir / commit) if commit else None
    if total is not None and commit is not None and requester:
        check_access(ref, token, endpoint, commit, repo_dir, requester)
    if total is None or commit is None:
        with _hub(ref, token, endpoint) as hub:
            commit, listing = _listing(hub, commit)
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
                _let_in(repo_dir, commit, requester)  # its listing, with its token, answered
            except OSError as exc:
                raise HubError(f"cannot write {repo_dir}: {exc}") from exc
    if progress:
        progress(total, total)
    log.info("staged %s@%s into %s", ref.name, commit, repo_dir / commit)
    return repo_dir / commit, commit
