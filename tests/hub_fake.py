"""A fake model hub for tests, on 127.0.0.1: Hugging Face Hub's API as its official client
(huggingface_hub: model_info, list_repo_tree / list_repo_files, hf_hub_download,
snapshot_download) uses it, and ModelScope's legacy /api/v1 as its official client uses it
(modelscope_hub: list_repo_revisions, list_repo_files, download_file). The test sets up
repositories, commits, branches, tags and access; every request is recorded (method, path, query,
whether it carried a token, its Range).

Hugging Face:
- GET /api/models/{repo}[/revision/{rev}][?blobs=true]: id, sha (the commit), private, gated,
  siblings (with blobs: size, blobId and, for LFS files, lfs.sha256/size).
- GET /api/models/{repo}/tree/{rev}[/{path}][?recursive=true]: files (type, path, size, oid,
  lfs.oid/size/pointerSize) and directories, in one page.
- HEAD|GET /{repo}/resolve/{rev}/{path}: X-Repo-Commit, ETag (git blob sha1; sha256 for LFS
  files), Content-Length, Accept-Ranges, Range -> 206 with Content-Range; no Xet headers, so the
  client downloads over plain HTTP. With `cdn=True`, LFS files answer 302 to
  http://localhost:{port}/cdn/... (another origin, as a CDN is) with X-Linked-Etag/-Size.
- Errors as the Hub answers them, in X-Error-Code / X-Error-Message and a JSON body: a missing
  (or private, inaccessible) repository 401 RepoNotFound without a token, 404 with one; a missing
  revision 404 RevisionNotFound; a missing file 404 EntryNotFound; a gated repository's files
  401 GatedRepo without a token, 403 with one without access (its API stays public, as on the
  Hub); an unknown token 401 "Invalid credentials in Authorization header", anywhere.

ModelScope (answers {"Code": 200, "Data": ..., "Message", "RequestId", "Success": true}):
- GET /api/v1/models/{repo}/revisions: Data.RevisionMap.Branches/Tags: Revision, CommitId.
- GET /api/v1/models/{repo}/repo/files?Revision=&Recursive=True|False: Data.Files: Name, Path,
  Type (blob/tree), Size, Sha256, Revision, IsLFS (not recursive: the top level only).
- GET /api/v1/models/{repo}/repo?Revision=&FilePath=: the file, with Range (with `cdn=True`, LFS
  files answer 302 to the CDN, as ModelScope's do to its storage).
- The token as `Authorization: Bearer` or cookie m_session_id; no access: 401; a missing
  repository, revision or file: 404 with {"Code": 404, "Success": false, "Message"}.
- GET /api/v1/repos/internalAccelerationInfo (the client's probe for Alibaba Cloud): 404.

Faults: `cut(repo, path, n, m, ...)`: the next GETs of that file stop at byte n, then m, ... and
drop the connection (Content-Length promised the whole); `outage(repo, path, 503, ...)`: the GETs
after those answer these statuses; `api_outage(503, ...)`: so do the next API requests.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".png", ".gguf")
_REPO = r"(?P<repo>[^/]+/[^/]+)"
HF_INFO = re.compile(rf"^/api/models/{_REPO}(?:/revision/(?P<rev>[^/]+))?$")
HF_TREE = re.compile(rf"^/api/models/{_REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?$")
HF_FILE = re.compile(rf"^/{_REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
CDN_FILE = re.compile(rf"^/cdn/{_REPO}/(?P<rev>[0-9a-f]{{40}})/(?P<path>.+)$")
MS_REVISIONS = re.compile(rf"^/api/v1/models/{_REPO}/revisions$")
MS_FILES = re.compile(rf"^/api/v1/models/{_REPO}/repo/files$")
MS_FILE = re.compile(rf"^/api/v1/models/{_REPO}/repo$")
INVALID_TOKEN = "Invalid credentials in Authorization header"
API_ROUTES = (HF_INFO, HF_TREE, MS_REVISIONS, MS_FILES)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    gated: bool = False
    private: bool = False
    tokens: set[str] = field(default_factory=set)  # tokens with access

    def commit_of(self, revision: str) -> str | None:
        if revision in self.commits:
            return revision
        return self.branches.get(revision) or self.tags.get(revision)


@dataclass(frozen=True)
class Seen:
    """One request as the fake received it."""

    method: str
    host: str
    path: str  # decoded, without the query
    query: dict[str, str]
    authorized: bool  # an Authorization header came
    cookie: bool  # an m_session_id cookie came
    range: str | None
    file: tuple[str, str] | None  # (repo, path) of a file download


class FakeHub:
    """Start with `with FakeHub() as hub:`; `hub.url` is its endpoint."""

    def __init__(self, *, cdn: bool = False) -> None:
        self.cdn = cdn
        self.ms_commit_ids = True  # ModelScope's revisions carry CommitId
        self.repos: dict[str, Repo] = {}
        self.valid_tokens: set[str] = set()  # tokens the hub knows, with no grants of their own
        self.requests: list[Seen] = []
        self.cuts: dict[tuple[str, str], list[int]] = {}
        self.outages: dict[tuple[str, str], list[int]] = {}
        self.api_outages: list[int] = []
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    # Setting up ------------------------------------------------------------------------------
    def add_repo(
        self,
        repo: str,
        files: dict[str, bytes],
        *,
        branch: str = "main",
        gated: bool = False,
        private: bool = False,
        token: str | None = None,
    ) -> str:
        """A repository whose `branch` has one commit with `files`; returns that commit."""
        self.repos[repo] = Repo(gated=gated, private=private, tokens={token} if token else set())
        return self.commit(repo, files, branch=branch)

    def commit(self, repo: str, files: dict[str, bytes], *, branch: str = "main") -> str:
        """A new commit on `branch` whose tree is `files`; returns it."""
        state = self.repos[repo]
        seed = f"{repo}\n{len(state.commits)}\n{sorted(files)}\n{uuid.uuid4()}".encode()
        sha = hashlib.sha1(seed, usedforsecurity=False).hexdigest()
        state.commits[sha] = dict(files)
        state.branches[branch] = sha
        return sha

    def tag(self, repo: str, tag: str, commit: str) -> None:
        self.repos[repo].tags[tag] = commit

    def cut(self, repo: str, path: str, *offsets: int) -> None:
        """The next GETs of `path` stop at these offsets, one each, and drop the connection."""
        self.cuts[(repo, path)] = sorted(offsets)

    def outage(self, repo: str, path: str, *statuses: int) -> None:
        """The next GETs of `path` (once its cuts are spent) answer these statuses (502, 503,
        429...), one each."""
        self.outages[(repo, path)] = list(statuses)

    def api_outage(self, *statuses: int) -> None:
        """The next API requests (not file downloads) answer these statuses, one each."""
        self.api_outages = list(statuses)

    # Inspecting ------------------------------------------------------------------------------
    def file_gets(self, repo: str, path: str) -> list[Seen]:
        """The GETs of one file's content, in order (HF resolve, its CDN, ModelScope)."""
        return [s for s in self.requests if s.method == "GET" and s.file == (repo, path)]

    def downloads(self) -> list[Seen]:
        """Every GET of a file's content."""
        return [s for s in self.requests if s.method == "GET" and s.file is not None]

    @property
    def url(self) -> str:
        assert self.server is not None, "start() the hub first"
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    # Serving ---------------------------------------------------------------------------------
    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            fake = hub

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        serve = self.server.serve_forever
        threading.Thread(target=serve, kwargs={"poll_interval": 0.02}, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self) -> FakeHub:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as real servers: no write waits for a delayed ACK
    fake: FakeHub

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass

    # Who is asking ---------------------------------------------------------------------------
    def token(self) -> str | None:
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return auth[len("Bearer ") :]
        cookies = dict(
            part.strip().split("=", 1)
            for part in self.headers.get("Cookie", "").split(";")
            if "=" in part
        )
        return cookies.get("m_session_id")

    def record(self, file: tuple[str, str] | None = None) -> None:
        split = urlsplit(self.path)
        seen = Seen(
            method=self.command,
            host=self.headers.get("Host", ""),
            path=unquote(split.path),
            query=dict(parse_qsl(split.query)),
            authorized="Authorization" in self.headers,
            cookie="m_session_id=" in self.headers.get("Cookie", ""),
            range=self.headers.get("Range"),
            file=file,
        )
        with self.fake.lock:
            self.fake.requests.append(seen)

    # Answering -------------------------------------------------------------------------------
    def send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def send_json(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send(status, data, {"Content-Type": "application/json"} | (headers or {}))

    def hf_error(self, status: int, code: str | None, message: str, **extra: str) -> None:
        headers = {"X-Error-Message": message} | ({"X-Error-Code": code} if code else {})
        self.send_json(status, {"error": message}, headers | extra)

    def ms_error(self, status: int, message: str) -> None:
        body = {"Code": status, "Message": message, "RequestId": uuid.uuid4().hex, "Success": False}
        self.send_json(status, body)

    def ms_ok(self, data: Any) -> None:
        body = {"Code": 200, "Data": data, "Message": "success", "Success": True}
        self.send_json(200, body | {"RequestId": uuid.uuid4().hex})

    # Routing ---------------------------------------------------------------------------------
    def route(self) -> None:
        raw = urlsplit(self.path).path
        query = dict(parse_qsl(urlsplit(self.path).query))
        for pattern, handler in (
            (HF_INFO, self.hf_info),
            (HF_TREE, self.hf_tree),
            (HF_FILE, self.hf_file),
            (CDN_FILE, self.cdn_file),
            (MS_REVISIONS, self.ms_revisions),
            (MS_FILES, self.ms_files),
            (MS_FILE, self.ms_file),
        ):
            if match := pattern.match(raw):
                groups = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                if pattern not in API_ROUTES or not self.api_outage():
                    handler(query=query, **groups)
                return
        self.record()
        self.hf_error(404, None, "Not Found")

    do_GET = do_HEAD = route  # noqa: N815 (the names http.server calls)

    def api_outage(self) -> bool:
        """Answer with the next API outage status, if one is due."""
        with self.fake.lock:
            status = self.fake.api_outages.pop(0) if self.fake.api_outages else None
        if status is None:
            return False
        self.record()
        self.send(status, b"upstream trouble", {"Content-Type": "text/plain"})
        return True

    def access(self, repo: str, *, files: bool) -> tuple[Repo | None, str | None]:
        """The repository if this request may see it (its files if `files`), else the HF error
        code and status to answer with, as ("RepoNotFound"|"GatedRepo"|"Invalid", status)."""
        token = self.token()
        known = self.fake.valid_tokens.union(*(r.tokens for r in self.fake.repos.values()))
        if token is not None and token not in known:
            return None, "Invalid"
        state = self.fake.repos.get(repo)
        granted = state is not None and token in state.tokens
        if state is None or (state.private and not granted):
            return None, "RepoNotFound"
        if state.gated and files and not granted:
            return None, "GatedRepo"
        return state, None

    def hf_denied(self, repo: str, why: str) -> None:
        if why == "Invalid":
            self.hf_error(401, None, INVALID_TOKEN)
        elif why == "GatedRepo":
            status = 403 if self.token() else 401
            message = f"Access to model {repo} is restricted. You must have access to it."
            self.hf_error(status, "GatedRepo", message)
        else:
            self.hf_error(404 if self.token() else 401, "RepoNotFound", "Repository not found")

    def hf_commit(self, repo: str, rev: str, *, files: bool) -> tuple[Repo, str] | None:
        """The repository and commit, or None once an error was sent."""
        state, why = self.access(repo, files=files)
        if state is None:
            self.hf_denied(repo, why or "RepoNotFound")
            return None
        commit = state.commit_of(rev)
        if commit is None:
            self.hf_error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return None
        return state, commit

    def hf_info(self, query: dict[str, str], repo: str, rev: str = "main") -> None:
        self.record()
        found = self.hf_commit(repo, rev, files=False)
        if found is None:
            return
        state, commit = found
        blobs = query.get("blobs", "").lower() in ("1", "true")
        siblings = []
        for path, data in sorted(state.commits[commit].items()):
            sibling: dict[str, Any] = {"rfilename": path}
            if blobs:
                sibling |= {"size": len(data), "blobId": git_blob_sha1(data)}
                if path.endswith(LFS_SUFFIXES):
                    sha = hashlib.sha256(data).hexdigest()
                    sibling["lfs"] = {"sha256": sha, "size": len(data), "pointerSize": 134}
            siblings.append(sibling)
        info: dict[str, Any] = {"id": repo, "modelId": repo, "author": repo.split("/")[0]}
        info["_id"] = hashlib.sha1(repo.encode(), usedforsecurity=False).hexdigest()[:24]
        info |= {"sha": commit, "private": state.private, "gated": state.gated and "manual"}
        info |= dict.fromkeys(("lastModified", "createdAt"), "2024-01-01T00:00:00.000Z")
        info |= {"disabled": False, "downloads": 0, "likes": 0, "tags": [], "siblings": siblings}
        self.send_json(200, info)

    def hf_tree(self, query: dict[str, str], repo: str, rev: str, path: str = "") -> None:
        self.record()
        found = self.hf_commit(repo, rev, files=False)
        if found is None:
            return
        state, commit = found
        recursive = query.get("recursive", "").lower() in ("1", "true")
        prefix = f"{path.strip('/')}/" if path.strip("/") else ""
        entries: dict[str, dict[str, Any]] = {}
        for name, data in sorted(state.commits[commit].items()):
            if not name.startswith(prefix):
                continue
            parts = name[len(prefix) :].split("/")
            for depth in range(1, len(parts)):  # the folders on the way
                folder = prefix + "/".join(parts[:depth])
                if recursive or depth == 1:
                    oid = hashlib.sha1(folder.encode(), usedforsecurity=False).hexdigest()
                    entries[folder] = {"type": "directory", "oid": oid, "size": 0, "path": folder}
            if recursive or len(parts) == 1:
                entry: dict[str, Any] = {"type": "file", "oid": git_blob_sha1(data)}
                entry |= {"size": len(data), "path": name}
                if name.endswith(LFS_SUFFIXES):
                    sha = hashlib.sha256(data).hexdigest()
                    entry["lfs"] = {"oid": sha, "size": len(data), "pointerSize": 134}
                entries[name] = entry
        if prefix and not entries:
            self.hf_error(404, "EntryNotFound", f"{path} does not exist on {rev}")
            return
        self.send_json(200, list(entries.values()))

    def hf_file(self, query: dict[str, str], repo: str, rev: str, path: str) -> None:
        self.record(file=(repo, path))
        found = self.hf_commit(repo, rev, files=True)
        if found is None:
            return
        state, commit = found
        data = state.commits[commit].get(path)
        if data is None:
            self.hf_error(404, "EntryNotFound", "Entry not found", **{"X-Repo-Commit": commit})
            return
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_blob_sha1(data)}"'}
        if path.endswith(LFS_SUFFIXES):
            sha = hashlib.sha256(data).hexdigest()
            if self.fake.cdn:
                linked = {"X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data))}
                self.to_cdn(repo, commit, path, headers | linked)
                return
            headers["ETag"] = f'"{sha}"'
        self.send_file(repo, path, data, headers)

    def to_cdn(self, repo: str, commit: str, path: str, headers: dict[str, str]) -> None:
        port = self.fake.url.rsplit(":", 1)[1]
        location = f"http://localhost:{port}/cdn/{repo}/{commit}/{quote(path)}"
        self.send(302, b"", headers | {"Location": location})

    def cdn_file(self, query: dict[str, str], repo: str, rev: str, path: str) -> None:
        """A CDN: signed URLs, no token needed (and none should come)."""
        self.record(file=(repo, path))
        data = self.fake.repos[repo].commits[rev][path]
        self.send_file(repo, path, data, {"ETag": f'"{hashlib.sha256(data).hexdigest()}"'})

    def send_file(self, repo: str, path: str, data: bytes, headers: dict[str, str]) -> None:
        """The file, or the range of it asked for; cut short if a cut is due."""
        start, status = 0, 200
        headers = headers | {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream"}
        if match := re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "")):
            start = int(match[1])
            end = int(match[2]) if match[2] else len(data) - 1
            if start >= len(data):
                self.send(416, b"", {"Content-Range": f"bytes */{len(data)}"})
                return
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            data, status = data[: end + 1], 206
        body = data[start:]
        cut = outage = None
        with self.fake.lock:
            due = self.fake.cuts.get((repo, path))
            if due and self.command == "GET" and due[0] > start:
                cut = due.pop(0)
            elif self.fake.outages.get((repo, path)) and self.command == "GET":
                outage = self.fake.outages[(repo, path)].pop(0)
        if outage is not None:
            self.send(outage, b"upstream trouble", {"Content-Type": "text/plain"})
            return
        if cut is not None:  # Content-Length promises the whole; the rest never comes
            headers, body = headers | {"Content-Length": str(len(body))}, body[: cut - start]
            self.close_connection = True
        self.send(status, body, headers)

    # ModelScope ------------------------------------------------------------------------------
    def ms_repo(self, repo: str) -> Repo | None:
        """The repository if this request may see it, else None once an error was sent."""
        state, why = self.access(repo, files=True)
        if state is None:
            if why == "RepoNotFound" and repo not in self.fake.repos:
                self.ms_error(404, f"model {repo} not found")
            else:
                self.ms_error(401, "Unauthorized: this model needs an access token with access")
        return state

    def ms_at(self, repo: str, query: dict[str, str]) -> tuple[Repo, str] | None:
        """The repository and the commit of the query's Revision, or None once an error was
        sent."""
        state = self.ms_repo(repo)
        commit = state.commit_of(query.get("Revision", "master")) if state else None
        if state and commit is None:
            self.ms_error(404, f"revision {query.get('Revision')} not found")
        return (state, commit) if state and commit else None

    def ms_revisions(self, query: dict[str, str], repo: str) -> None:
        self.record()
        state = self.ms_repo(repo)
        if state is None:
            return

        def refs(names: dict[str, str]) -> list[dict[str, Any]]:
            if not self.fake.ms_commit_ids:
                return [{"Revision": name} for name in names]
            when = {"CreatedAt": 1700000000}
            return [{"Revision": n, "CommitId": c} | when for n, c in names.items()]

        self.ms_ok({"RevisionMap": {"Branches": refs(state.branches), "Tags": refs(state.tags)}})

    def ms_files(self, query: dict[str, str], repo: str) -> None:
        self.record()
        if (found := self.ms_at(repo, query)) is None:
            return
        state, commit = found
        files: list[dict[str, Any]] = []
        folders: set[str] = set()
        deep = query.get("Recursive", "").lower() == "true"
        for path, data in sorted(state.commits[commit].items()):
            folders.update("/".join(path.split("/")[:i]) for i in range(1, path.count("/") + 1))
            if "/" in path and not deep:
                continue
            name, size = path.rsplit("/", 1)[-1], len(data)
            entry = {"Name": name, "Path": path, "Type": "blob", "Size": size, "Revision": commit}
            entry |= {"Sha256": hashlib.sha256(data).hexdigest(), "CommittedDate": 1700000000}
            files.append(entry | {"IsLFS": path.endswith(LFS_SUFFIXES)})
        folders = {f for f in folders if deep or "/" not in f}
        trees = [{"Name": f.rsplit("/", 1)[-1], "Path": f, "Type": "tree"} for f in sorted(folders)]
        self.ms_ok({"Files": [tree | {"Size": 0} for tree in trees] + files})

    def ms_file(self, query: dict[str, str], repo: str) -> None:
        path = query.get("FilePath", "")
        self.record(file=(repo, path))
        if (found := self.ms_at(repo, query)) is None:
            return
        state, commit = found
        data = state.commits[commit].get(path)
        if data is None:
            self.ms_error(404, f"file {path} not found")
        elif self.fake.cdn and path.endswith(LFS_SUFFIXES):
            self.to_cdn(repo, commit, path, {})
        else:
            self.send_file(repo, path, data, {})
