"""The fake cluster's API over HTTP/1.1 on loopback: the paths, verbs and parameters the
official client sends for the calls Wharf's runtime makes, and nothing else.

Served: GET (read, list, watch) of configmaps, secrets, pods, events, deployments, nodes and
namespaces; PATCH with server-side apply (application/apply-patch+yaml: the client sends the
body as JSON, which is YAML, with fieldManager and force in the query) of configmaps, secrets
and deployments; DELETE of configmaps, secrets, deployments and pods; GET of a pod's log.
Anything else is a 404 (an unknown path) or 405 (a verb the fake does not implement).

A watch (`watch=true`) streams chunked JSON lines, one event each, from `resourceVersion`
(none, or "0": the current objects as ADDED first) until `timeoutSeconds`; a version older
than the kept history gets an ERROR event holding a 410 Expired Status, as kube-apiserver's
watch cache sends it. An object that stops matching the watch's selectors is sent as DELETED
(as it was before, at the new version), one that starts matching as ADDED, as the watch cache
does.
"""

from __future__ import annotations

import contextlib
import json
import re
import select
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

import yaml
from kube_fake_apply import apply
from kube_fake_deletion import delete
from kube_fake_selectors import field_selector, label_selector
from kube_fake_store import KINDS, ApiError, Kind, bad_request

if TYPE_CHECKING:
    from kube_fake_cluster import FakeCluster

_NAMESPACED = re.compile(
    r"^/(?:api/v1|apis/(?P<group>apps|networking\.k8s\.io|leaderworkerset\.x-k8s\.io)/v1)/namespaces/(?P<ns>[^/]+)/"
    r"(?P<plural>[^/]+)"
    r"(?:/(?P<name>[^/]+)(?:/(?P<sub>[^/]+))?)?$"
)
_CLUSTER = re.compile(r"^/api/v1/(?P<plural>nodes|namespaces)(?:/(?P<name>[^/]+))?$")
_VERBS = {  # what the fake serves, by resource ("list": list and watch)
    "configmaps": {"get", "list", "apply", "delete"},
    "secrets": {"get", "list", "apply", "delete"},
    "deployments": {"get", "list", "apply", "delete"},
    "networkpolicies": {"get", "list", "apply", "delete"},
    "services": {"get", "list", "apply", "delete"},
    "leaderworkersets": {"get", "list", "apply", "delete"},
    "pods": {"get", "list", "delete", "log"},
    "events": {"get", "list"},
    "nodes": {"get", "list"},
    "namespaces": {"get", "list"},
}
APPLY = "application/apply-patch+yaml"
WATCH_DEFAULT_S = 1800


def _at_version(obj: dict | None, rv: int) -> dict:
    """An object that left a watch's selectors: as it was, at the version it left them."""
    assert obj is not None
    meta = {**obj["metadata"], "resourceVersion": str(rv)}
    return {**obj, "metadata": meta}


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # server_close() joins every request thread
    block_on_close = True

    def __init__(self, cluster: FakeCluster) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.cluster = cluster
        self.stopping = threading.Event()
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()


class ApiServer:
    def __init__(self, cluster: FakeCluster) -> None:
        self.server = _Server(cluster)
        self.thread = threading.Thread(
            target=self.server.serve_forever, args=(0.05,), name="fake-kube-api", daemon=True
        )

    def start(self) -> str:
        self.thread.start()
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def stop(self) -> None:
        """Stops serving: ends the watches, closes every connection, joins every thread."""
        server = self.server
        server.stopping.set()
        with server.cluster.store.changed:
            server.cluster.store.changed.notify_all()
        server.shutdown()
        with server.connections_lock:
            for connection in list(server.connections):
                with contextlib.suppress(OSError):  # already closed by its client
                    connection.shutdown(socket.SHUT_RDWR)
        server.server_close()
        self.thread.join()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle's algorithm the body waited for the
    # client's delayed ACK of the headers, up to 40 ms a response on a kept-alive connection.
    disable_nagle_algorithm = True
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.connections_lock:
            self.server.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.connections_lock:
            self.server.connections.discard(self.connection)
        with contextlib.suppress(OSError):  # the connection was shut down under it
            super().finish()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass

    def do_GET(self) -> None:  # noqa: N802 (BaseHTTPRequestHandler's names)
        self._serve("GET")

    def do_PATCH(self) -> None:  # noqa: N802
        self._serve("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    # Dispatch ------------------------------------------------------------------------------

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(url.query).items()}
        body = self._read_body()
        self._streaming = False
        try:
            self._route(method, url.path, query, body)
        except ApiError as error:
            self._json(error.code, error.status())
        except OSError:  # the client went away, or the server is stopping
            self.close_connection = True
        except Exception as error:  # a defect of the fake: a 500, as the API server answers
            if self._streaming:
                raise
            failure = ApiError(500, "InternalError", f"the fake API server failed: {error!r}")
            self._json(500, failure.status())

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _route(self, method: str, path: str, query: dict, body: bytes) -> None:
        found = _NAMESPACED.match(path) or _CLUSTER.match(path)
        groups = found.groupdict() if found else {}
        kind = KINDS.get(groups.get("plural", ""))
        if (
            not found
            or kind is None
            or kind.plural not in _VERBS
            or (groups.get("group") or "") != kind.group
            or ("ns" in groups and not kind.namespaced)
            or (kind.plural == "leaderworkersets" and not self.server.cluster.leader_worker_sets)
        ):
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace, name, sub = groups.get("ns") or "", groups.get("name"), groups.get("sub")
        verb = self._verb(method, name, sub, query)
        if verb.replace("watch", "list") not in _VERBS[kind.plural]:
            raise ApiError(
                405,
                "MethodNotAllowed",
                f"the fake API server does not implement {method} {path} ({verb} {kind.plural})",
            )
        cluster = self.server.cluster
        cluster.authorized.append(self._rbac(kind, verb, namespace, name))
        if verb == "watch":
            self._watch(kind, namespace, query)
        elif verb == "list":
            self._json(200, self._list(kind, namespace, query))
        elif verb == "get":
            with cluster.store.lock:
                self._json(200, cluster.store.require(kind, namespace, name or ""))
        elif verb == "log":
            tail = int(query["tailLines"]) if "tailLines" in query else None
            if (
                query.get("previous", "false").lower() == "true"
                or query.get("follow", "false").lower() == "true"
            ):
                raise bad_request("the fake API server serves neither previous nor followed logs")
            text = cluster.read_log(namespace, name or "", query.get("container"), tail)
            self._send(200, text.encode(), "text/plain")
        elif verb == "apply":
            self._apply(kind, namespace, name or "", query, body)
        elif verb == "delete":
            self._delete(kind, namespace, name or "", query, body)

    def _rbac(self, kind: Kind, verb: str, namespace: str, name: str | None) -> tuple:
        """The request as RBAC authorizes it: an apply creating an object is a `create`."""
        if verb == "log":
            return ("get", kind.group, f"{kind.plural}/log")
        if verb == "apply":
            store = self.server.cluster.store
            with store.lock:
                verb = "patch" if store.get(kind, namespace, name or "") else "create"
        return (verb, kind.group, kind.plural)

    @staticmethod
    def _verb(method: str, name: str | None, sub: str | None, query: dict) -> str:
        if sub is not None:
            return "log" if method == "GET" and sub == "log" else f"{method.lower()} {sub}"
        if method == "GET":
            if name is None:
                return "watch" if query.get("watch", "").lower() in ("true", "1") else "list"
            return "get"
        if method == "PATCH" and name is not None:
            return "apply"
        if method == "DELETE" and name is not None:
            return "delete"
        return method.lower()

    # Verbs ---------------------------------------------------------------------------------

    def _list(self, kind: Kind, namespace: str, query: dict) -> dict:
        picks = label_selector(query.get("labelSelector"))
        fields = field_selector(kind, query.get("fieldSelector"))
        store = self.server.cluster.store
        with store.lock:
            scope = namespace if kind.namespaced else None
            items = [obj for obj in store.items(kind, scope) if picks(obj) and fields(obj)]
            version = str(store.rv)
        for item in items:  # items of a list carry no kind nor apiVersion
            item.pop("kind", None)
            item.pop("apiVersion", None)
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": version},
            "items": items,
        }

    def _apply(self, kind: Kind, namespace: str, name: str, query: dict, body: bytes) -> None:
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type != APPLY:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the fake API server implements only server-side apply ({APPLY}) among "
                f"patches, not {content_type or 'a body without a Content-Type'}",
            )
        if "dryRun" in query:
            raise bad_request("the fake API server does not implement dryRun")
        try:
            document = yaml.safe_load(body.decode() or "null")
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            raise bad_request(f"error decoding YAML: {error}") from None
        force = query.get("force", "false").lower() in ("true", "1")
        cluster = self.server.cluster
        with cluster.store.lock:
            obj, created = apply(
                cluster.store, kind, namespace, name, document, query.get("fieldManager"), force
            )
            if cluster.auto_settle:
                cluster.settle()
        self._json(201 if created else 200, obj)

    def _delete(self, kind: Kind, namespace: str, name: str, query: dict, body: bytes) -> None:
        options = json.loads(body) if body.strip() else {}
        if not isinstance(options, dict):
            raise bad_request("the body of a DELETE must be a DeleteOptions")
        policy = options.get("propagationPolicy") or query.get("propagationPolicy")
        grace = options.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        cluster = self.server.cluster
        with cluster.store.lock:
            result = delete(
                cluster.store,
                kind,
                namespace,
                name,
                policy,
                None if grace is None else int(grace),
                options.get("preconditions"),
            )
            if cluster.auto_settle:
                cluster.settle()
        self._json(200, result)

    def _watch(self, kind: Kind, namespace: str, query: dict) -> None:
        picks = label_selector(query.get("labelSelector"))
        fields = field_selector(kind, query.get("fieldSelector"))

        def matches(obj: dict | None) -> bool:
            return obj is not None and picks(obj) and fields(obj)

        timeout = int(query.get("timeoutSeconds") or WATCH_DEFAULT_S)
        deadline = time.monotonic() + timeout
        store = self.server.cluster.store
        since = query.get("resourceVersion") or "0"
        with store.lock:
            if since == "0":
                scope = namespace if kind.namespaced else None
                first = [("ADDED", obj) for obj in store.items(kind, scope) if matches(obj)]
                last = store.rv
            else:
                first, last = [], int(since)
        self._start_stream()
        for event_type, obj in first:
            self._event(event_type, obj)
        while not self.server.stopping.is_set() and time.monotonic() < deadline:
            with store.changed:
                try:
                    changes = store.changes_after(last)
                except ApiError as error:
                    self._event("ERROR", error.status())
                    break
                if not changes:
                    store.changed.wait(min(0.2, max(deadline - time.monotonic(), 0)))
            for change in changes:
                last = change.rv
                if change.kind is not kind or (
                    kind.namespaced and change.obj["metadata"].get("namespace") != namespace
                ):
                    continue
                now_in, was_in = matches(change.obj), matches(change.before)
                if change.type == "MODIFIED" and now_in and not was_in:
                    self._event("ADDED", change.obj)
                elif change.type == "MODIFIED" and was_in and not now_in:
                    self._event("DELETED", _at_version(change.before, change.rv))
                elif now_in or (change.type == "DELETED" and was_in):
                    self._event(change.type, change.obj)
            if self._client_gone():
                return
        self._end_stream()

    # Responses -----------------------------------------------------------------------------

    def _json(self, code: int, body: dict) -> None:
        self._send(code, json.dumps(body).encode(), "application/json")

    def _send(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _start_stream(self) -> None:
        self._streaming = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()

    def _event(self, event_type: str, obj: dict) -> None:
        line = json.dumps({"type": event_type, "object": obj}).encode() + b"\n"
        self.wfile.write(f"{len(line):X}\r\n".encode() + line + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _client_gone(self) -> bool:
        """Whether the client closed the connection (a watch stopped by its client)."""
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        try:
            return self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True
