"""A private image registry for tests: the Docker Registry HTTP API v2, as much of it as a
pull uses, on 127.0.0.1 (dockerd talks plain HTTP to registries on 127.0.0.0/8) behind HTTP
Basic auth, serving images exported from the local daemon (`docker save`)."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import re
import tarfile
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_V1 = "application/vnd.docker.container.image.v1+json"
LAYER_GZIP = "application/vnd.docker.image.rootfs.diff.tar.gzip"
REALM = "wharf-test"
ROUTE = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def docker_auth(user: str, password: str) -> str:
    """EAS's dockerAuth: base64 of "user:password"."""
    return base64.b64encode(f"{user}:{password}".encode()).decode()


@dataclass
class Registry:
    """Images by "name:tag" as schema-2 manifests, blobs by digest; `start()` serves them."""

    user: str = "wharf"
    password: str = "s3cret"
    # Blobs are sent in chunks at this rate (bytes/s), so that a pull takes long enough to
    # report its progress; 0: at once.
    rate: int = 0
    manifests: dict[str, bytes] = field(default_factory=dict)
    blobs: dict[str, bytes] = field(default_factory=dict)
    requests: list[tuple[str, str, bool]] = field(default_factory=list)  # method, path, authed
    server: ThreadingHTTPServer | None = None

    @property
    def address(self) -> str:
        assert self.server is not None, "start() the registry first"
        return f"127.0.0.1:{self.server.server_address[1]}"

    def add_saved(self, saved: bytes, name: str, tag: str) -> str:
        """Serve the image in `saved` (a `docker save` tar of one image) as name:tag; its
        layers gzipped. Returns the manifest's digest."""
        with tarfile.open(fileobj=io.BytesIO(saved)) as archive:
            (entry,) = json.loads(archive.extractfile("manifest.json").read())
            config = archive.extractfile(entry["Config"]).read()
            layers = []
            for path in entry["Layers"]:
                # mtime 0: a layer gzips to the same bytes, so the same digest, every time.
                blob = gzip.compress(archive.extractfile(path).read(), mtime=0)
                self.blobs[digest(blob)] = blob
                layers.append({"mediaType": LAYER_GZIP, "size": len(blob),
                               "digest": digest(blob)})  # fmt: skip
        self.blobs[digest(config)] = config
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": MANIFEST_V2,
            "config": {"mediaType": CONFIG_V1, "size": len(config), "digest": digest(config)},
            "layers": layers,
        }).encode()  # fmt: skip
        self.manifests[f"{name}:{tag}"] = manifest
        self.manifests[f"{name}:{digest(manifest)}"] = manifest
        return digest(manifest)

    def start(self) -> Registry:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # as real servers: no write waits for a delayed ACK

            def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base's name)
                pass

            def do_HEAD(self) -> None:  # noqa: N802 (http.server's naming)
                self._serve(body=False)

            def do_GET(self) -> None:  # noqa: N802
                self._serve(body=True)

            def _authed(self) -> bool:
                expected = "Basic " + docker_auth(registry.user, registry.password)
                return self.headers.get("Authorization") == expected

            def _serve(self, body: bool) -> None:
                authed = self._authed()
                registry.requests.append((self.command, self.path, authed))
                if not authed:
                    return self._error(401, "UNAUTHORIZED", "authentication required",
                                       {"WWW-Authenticate": f'Basic realm="{REALM}"'})  # fmt: skip
                path = self.path.split("?", 1)[0]
                if path == "/v2/":
                    return self._send(200, b"{}", "application/json", body)
                match = ROUTE.match(path)
                if not match:
                    return self._error(404, "NAME_UNKNOWN", "repository name not known")
                name, kind, ref = match["name"], match["kind"], match["ref"]
                if kind == "manifests":
                    data = registry.manifests.get(f"{name}:{ref}")
                    if data is None:
                        return self._error(404, "MANIFEST_UNKNOWN", "manifest unknown")
                    return self._send(200, data, MANIFEST_V2, body)
                data = registry.blobs.get(ref)
                if data is None:
                    return self._error(404, "BLOB_UNKNOWN", "blob unknown to registry")
                return self._send(200, data, "application/octet-stream", body)

            def _error(self, status: int, code: str, message: str, headers=None) -> None:
                data = json.dumps({"errors": [{"code": code, "message": message}]}).encode()
                self._send(status, data, "application/json", True, headers or {})

            def _send(self, status, data: bytes, content_type, body: bool, headers=None):
                self.send_response(status)
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                if content_type == MANIFEST_V2:
                    self.send_header("Docker-Content-Digest", digest(data))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if not body:
                    return
                chunk = max(registry.rate // 20, 1) if registry.rate else len(data)
                for start in range(0, len(data), chunk):
                    self.wfile.write(data[start : start + chunk])
                    self.wfile.flush()
                    if registry.rate:
                        time.sleep(0.05)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
