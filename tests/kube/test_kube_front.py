"""An engine pod's front (contracts.kube.front): the container that owns the pod's `http` port
and checks the engine key, its secrets read by reference from the service's Secret."""

from __future__ import annotations

import base64
import json
from dataclasses import replace

from tests.kube_manifest_support import BASE, SETTINGS, objects, pod


def test_the_front_owns_the_pods_http_port_and_reads_its_secrets_by_reference():
    """The gateways call the pod's `http` port (workers.kube.observe): the front's, which lets
    in only the engine key; the metrics token, where set, is in the service's Secret."""
    settings = replace(SETTINGS, metrics_token="prom-token")
    objs = objects(BASE, settings)
    _, front = pod(objs)["containers"]
    assert front["image"] == SETTINGS.stager_image
    assert front["ports"] == [{"name": "http", "containerPort": 18999, "protocol": "TCP"}]
    args = front["args"]
    assert args[:3] == ["python", "-m", "gateway.front"]
    assert args[args.index("--upstream") + 1] == "127.0.0.1:8000"
    assert args[args.index("--metrics-path") + 1] == "/metrics"
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in front["env"]}
    assert set(refs) == {"WHARF_FRONT_KEY", "WHARF_FRONT_METRICS_TOKEN"}
    (secret,) = [o for o in objs if o["kind"] == "Secret"]
    assert (
        base64.b64decode(secret["data"][refs["WHARF_FRONT_METRICS_TOKEN"]["key"]]) == b"prom-token"
    )
    assert refs["WHARF_FRONT_KEY"]["key"] in secret["data"]
    assert "prom-token" not in json.dumps(pod(objs))
    assert front["resources"]["limits"] == {"cpu": "1", "memory": "256Mi"}
