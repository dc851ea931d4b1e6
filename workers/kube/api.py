"""The Kubernetes runtime's calls to the cluster, through the official client, and nothing else.

Few and standard, so that a real cluster behaves as the tests' fake does: server-side apply
of ConfigMaps, Secrets, Deployments, Services and LeaderWorkerSets (a custom resource, for
instances across hosts: contracts.kube.lws) under Wharf's field manager; lists and watches of pods,
Deployments and Events by Wharf's labels; deletes; pod logs; the nodes. Objects go out and
come back as plain dicts (`_preload_content=False`), the shape the manifests and the observer
(pure functions) read and write.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from contracts.kube import lws, names
from contracts.kube.pod_template import ENGINE

APPLY = "application/apply-patch+yaml"  # server-side apply; a JSON body is YAML too
TIMEOUT = (5, 30)  # seconds: connect, read (watches set their own)


def connect(kubeconfig: str = "") -> client.ApiClient:
    """A client for WHARF_KUBECONFIG's cluster, or, without one, the pod's own service
    account (in-cluster credentials)."""
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    config.load_incluster_config()
    return client.ApiClient()


def _json(response: Any) -> dict:
    return json.loads(response.data or b"{}")


class Cluster:
    """One namespace of one cluster, as the runtime uses it."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.namespace = namespace
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.networking = client.NetworkingV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    # -- writes ---------------------------------------------------------------------------

    def apply(self, obj: dict) -> dict:
        """Create or update `obj` (server-side apply, Wharf's field manager, conflicts
        forced: Wharf owns what it renders); the object as the cluster holds it."""
        kind, name = obj["kind"], obj["metadata"]["name"]
        patch = {
            "ConfigMap": self.core.patch_namespaced_config_map,
            "Secret": self.core.patch_namespaced_secret,
            "Deployment": self.apps.patch_namespaced_deployment,
            "NetworkPolicy": self.networking.patch_namespaced_network_policy,
            "Service": self.core.patch_namespaced_service,
            lws.KIND: self._patch_leader_worker_set,
        }[kind]
        response = patch(
            name, self.namespace, obj, field_manager=names.FIELD_MANAGER, force=True,
            _content_type=APPLY, _preload_content=False, _request_timeout=TIMEOUT,
        )  # fmt: skip
        return _json(response)

    def delete(self, kind: str, name: str) -> bool:
        """Delete one object Wharf made, its dependents after it (the garbage collector, in
        the background); False when it was already gone."""
        remove = {
            "ConfigMap": self.core.delete_namespaced_config_map,
            "Secret": self.core.delete_namespaced_secret,
            "Deployment": self.apps.delete_namespaced_deployment,
            "NetworkPolicy": self.networking.delete_namespaced_network_policy,
            "Pod": self.core.delete_namespaced_pod,
            "Service": self.core.delete_namespaced_service,
            lws.KIND: self._delete_leader_worker_set,
        }[kind]
        try:
            remove(
                name, self.namespace, propagation_policy="Background", _preload_content=False,
                _request_timeout=TIMEOUT,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def _patch_leader_worker_set(self, name: str, namespace: str, body: dict, **kwargs):
        return self.custom.patch_namespaced_custom_object(
            lws.GROUP, lws.VERSION, namespace, lws.PLURAL, name, body, **kwargs
        )

    def _delete_leader_worker_set(self, name: str, namespace: str, **kwargs):
        return self.custom.delete_namespaced_custom_object(
            lws.GROUP, lws.VERSION, namespace, lws.PLURAL, name, **kwargs
        )

    # -- reads ----------------------------------------------------------------------------

    def read(self, kind: str, name: str) -> dict | None:
        read = {
            "ConfigMap": self.core.read_namespaced_config_map,
            "Deployment": self.apps.read_namespaced_deployment,
        }[kind]
        try:
            return _json(read(name, self.namespace, _preload_content=False,
                              _request_timeout=TIMEOUT))  # fmt: skip
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def pods(self, selector: str) -> list[dict]:
        return self._items(self.core.list_namespaced_pod, selector)

    def deployments(self, selector: str) -> list[dict]:
        return self._items(self.apps.list_namespaced_deployment, selector)

    def leader_worker_sets(self, selector: str) -> list[dict] | None:
        """The namespace's LeaderWorkerSets matching `selector`; None when the cluster has no
        such resource (its CRD is not installed: the API answers 404) or Wharf may not list
        them (403: the Kustomize component deploy/kubernetes/components/leaderworkerset is not
        applied), so none of Wharf's."""
        try:
            response = self.custom.list_namespaced_custom_object(
                lws.GROUP, lws.VERSION, self.namespace, lws.PLURAL, label_selector=selector,
                _preload_content=False, _request_timeout=TIMEOUT,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status in (403, 404):
                return None
            raise
        return list(_json(response).get("items") or [])

    def events(self, involved: str | None = None) -> list[dict]:
        """The namespace's events, or those about the object named `involved`."""
        fields = f"involvedObject.name={involved}" if involved else None
        response = self.core.list_namespaced_event(
            self.namespace, field_selector=fields, _preload_content=False,
            _request_timeout=TIMEOUT,
        )  # fmt: skip
        return list(_json(response).get("items") or [])

    def log(self, pod: str, tail: int = 200) -> str:
        response = self.core.read_namespaced_pod_log(  # the engine's, not its front's
            pod, self.namespace, container=ENGINE, tail_lines=tail, _preload_content=False,
            _request_timeout=TIMEOUT,
        )  # fmt: skip
        return bytes(response.data or b"").decode(errors="replace")

    def nodes(self) -> list[dict]:
        response = self.core.list_node(_preload_content=False, _request_timeout=TIMEOUT)
        return list(_json(response).get("items") or [])

    def _items(self, list_call, selector: str) -> list[dict]:
        response = list_call(
            self.namespace, label_selector=selector, _preload_content=False,
            _request_timeout=TIMEOUT,
        )  # fmt: skip
        return list(_json(response).get("items") or [])

    # -- watches --------------------------------------------------------------------------

    def watch_pods(self, timeout_s: int, since: str | None = None) -> Iterator[dict]:
        """Changes to Wharf's pods after resourceVersion `since` (None: from now, each
        existing pod first as ADDED) for up to `timeout_s` seconds, each {"type", "object"}
        with the object a dict; ApiException 410 when `since` is older than the server keeps."""
        yield from self._watch(self.core.list_namespaced_pod, timeout_s, since)

    def watch_deployments(self, timeout_s: int, since: str | None = None) -> Iterator[dict]:
        yield from self._watch(self.apps.list_namespaced_deployment, timeout_s, since)

    def _watch(self, list_call, timeout_s: int, since: str | None) -> Iterator[dict]:
        stream = watch.Watch()
        kwargs: dict[str, Any] = {"timeout_seconds": timeout_s, "label_selector": names.selector()}
        if since:
            kwargs["resource_version"] = since
        try:
            for event in stream.stream(list_call, self.namespace, **kwargs):
                yield {"type": event["type"], "object": event["raw_object"]}
        finally:
            stream.stop()
