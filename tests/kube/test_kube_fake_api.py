"""The fake cluster's API, through the official client only: server-side apply, reads and
lists, selectors, watches, the API server's error bodies, deletion and garbage collection."""

from __future__ import annotations

import base64
import json
import threading

import kubernetes
import pytest
from kube_fake_cluster import FakeCluster
from kube_fake_objects import APPLY, config_map, deployment, names, owned_by, secret
from kubernetes.client import ApiException


def error_body(raised: pytest.ExceptionInfo[ApiException]) -> dict:
    return json.loads(raised.value.body)


def test_apply_creates_then_updates_with_generation_bumped_only_by_spec_changes(kube):
    _, code, _ = kube.apps.patch_namespaced_deployment_with_http_info(
        "svc", "default", deployment(), **APPLY
    )
    created = kube.apps.read_namespaced_deployment("svc", "default")
    again, again_code, _ = kube.apps.patch_namespaced_deployment_with_http_info(
        "svc", "default", deployment(), **APPLY
    )
    relabelled = kube.apps.patch_namespaced_deployment(
        "svc", "default", deployment(labels={"app": "svc", "team": "a"}), **APPLY
    )
    scaled = kube.apps.patch_namespaced_deployment(
        "svc", "default", deployment(replicas=3, labels={"app": "svc", "team": "a"}), **APPLY
    )
    assert (code, again_code) == (201, 200)
    assert created.metadata.generation == 1 and created.metadata.uid
    assert created.spec.progress_deadline_seconds == 600  # the API server's defaults
    container = created.spec.template.spec.containers[0]
    assert (container.image_pull_policy, container.ports[0].protocol) == ("IfNotPresent", "TCP")
    assert again.metadata.resource_version == created.metadata.resource_version  # a no-op
    assert relabelled.metadata.generation == 1
    assert int(relabelled.metadata.resource_version) > int(created.metadata.resource_version)
    assert scaled.metadata.generation == 2
    assert int(scaled.metadata.resource_version) > int(relabelled.metadata.resource_version)
    assert [entry.manager for entry in scaled.metadata.managed_fields] == ["wharf"]


def test_apply_drops_what_the_manager_stopped_giving_and_keeps_status(kube):
    kube.apps.patch_namespaced_deployment(
        "svc", "default", deployment(labels={"app": "svc", "old": "x"}), **APPLY
    )
    kube.cluster.settle()
    updated = kube.apps.patch_namespaced_deployment("svc", "default", deployment(), **APPLY)
    assert updated.metadata.labels == {"app": "svc"}
    assert updated.status.replicas == 2 and updated.status.observed_generation == 1


def test_a_secret_keeps_string_data_as_base64_data_and_never_returns_it(kube):
    kube.core.patch_namespaced_secret(
        "keys", "default", secret("keys", {"engine-key": "k1", "old": "x"}), **APPLY
    )
    read = kube.core.patch_namespaced_secret(
        "keys", "default", secret("keys", {"engine-key": "k2"}), **APPLY
    )
    raw = kube.core.read_namespaced_secret("keys", "default", _preload_content=False)
    assert base64.b64decode(read.data["engine-key"]) == b"k2"
    assert read.string_data is None and "stringData" not in json.loads(raw.data)
    # A key dropped from stringData stays, as on a real cluster (kubernetes#108008).
    assert base64.b64decode(read.data["old"]) == b"x"


def test_a_field_another_manager_owns_is_a_conflict_unless_forced(kube):
    kube.core.patch_namespaced_config_map("cm", "default", config_map("cm", {"a": "1"}), **APPLY)
    other = {**APPLY, "field_manager": "someone-else", "force": False}
    with pytest.raises(ApiException) as raised:
        kube.core.patch_namespaced_config_map(
            "cm", "default", config_map("cm", {"a": "2"}), **other
        )
    taken = kube.core.patch_namespaced_config_map(
        "cm", "default", config_map("cm", {"a": "2"}), **{**other, "force": True}
    )
    assert raised.value.status == 409
    assert error_body(raised)["reason"] == "Conflict"
    assert 'conflict with "wharf"' in error_body(raised)["message"]
    assert taken.data == {"a": "2"}


def test_lists_select_by_labels(kube):
    for name, role in (("a", "prefill"), ("b", "decode"), ("c", None)):
        labels = {
            "app.kubernetes.io/managed-by": "wharf",
            **({"wharf.io/role": role} if role else {}),
        }
        kube.core.patch_namespaced_config_map(
            name, "default", config_map(name, labels=labels), **APPLY
        )

    def listed(selector: str) -> list[str]:
        return names(kube.core.list_namespaced_config_map("default", label_selector=selector).items)

    assert listed("app.kubernetes.io/managed-by=wharf,wharf.io/role=decode") == ["b"]
    assert listed("wharf.io/role in (prefill,decode)") == ["a", "b"]
    assert listed("app.kubernetes.io/managed-by=wharf,!wharf.io/role") == ["c"]
    assert listed("wharf.io/role!=decode") == ["a", "c"]


def test_a_watch_replays_added_modified_deleted_in_order_from_a_resource_version(kube):
    since = kube.core.list_namespaced_config_map("default").metadata.resource_version
    kube.core.patch_namespaced_config_map("cm", "default", config_map("cm", {"a": "1"}), **APPLY)
    kube.core.patch_namespaced_config_map("cm", "default", config_map("cm", {"a": "2"}), **APPLY)
    kube.core.delete_namespaced_config_map("cm", "default")
    stream = kubernetes.watch.Watch().stream(
        kube.core.list_namespaced_config_map, "default", resource_version=since, timeout_seconds=1
    )
    seen = [(event["type"], event["object"].data) for event in stream]
    assert seen == [("ADDED", {"a": "1"}), ("MODIFIED", {"a": "2"}), ("DELETED", {"a": "2"})]


def test_a_watch_streams_while_other_requests_are_served(kube):
    since = kube.core.list_namespaced_config_map("default").metadata.resource_version
    watch, seen = kubernetes.watch.Watch(), []

    def follow() -> None:
        for event in watch.stream(
            kube.core.list_namespaced_config_map,
            "default",
            resource_version=since,
            timeout_seconds=10,
        ):
            seen.append((event["type"], event["object"].metadata.name))
            if len(seen) == 2:
                watch.stop()

    follower = threading.Thread(target=follow)
    follower.start()
    kube.core.patch_namespaced_config_map("one", "default", config_map("one"), **APPLY)
    kube.core.patch_namespaced_config_map("two", "default", config_map("two"), **APPLY)
    follower.join(timeout=10)
    assert not follower.is_alive()
    assert seen == [("ADDED", "one"), ("ADDED", "two")]


def test_a_watch_from_a_compacted_resource_version_is_410_gone(kube):
    since = kube.core.list_namespaced_config_map("default").metadata.resource_version
    kube.core.patch_namespaced_config_map("cm", "default", config_map("cm"), **APPLY)
    kube.cluster.compact()
    with pytest.raises(ApiException) as raised:
        list(
            kubernetes.watch.Watch().stream(
                kube.core.list_namespaced_config_map,
                "default",
                resource_version=since,
                timeout_seconds=1,
            )
        )
    assert raised.value.status == 410
    assert "Expired: too old resource version" in raised.value.reason


def test_a_watch_sees_an_object_leaving_its_selector_as_deleted(kube):
    kube.core.patch_namespaced_config_map(
        "cm", "default", config_map("cm", labels={"on": "yes"}), **APPLY
    )
    since = kube.core.list_namespaced_config_map("default").metadata.resource_version
    kube.core.patch_namespaced_config_map(
        "cm", "default", config_map("cm", labels={"on": "no"}), **APPLY
    )
    stream = kubernetes.watch.Watch().stream(
        kube.core.list_namespaced_config_map,
        "default",
        label_selector="on=yes",
        resource_version=since,
        timeout_seconds=1,
    )
    assert [(event["type"], event["object"].metadata.labels) for event in stream] == [
        ("DELETED", {"on": "yes"})
    ]


def test_a_missing_object_is_a_404_status(kube):
    with pytest.raises(ApiException) as raised:
        kube.apps.read_namespaced_deployment("nothing", "default")
    assert raised.value.status == 404
    assert error_body(raised) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'deployments.apps "nothing" not found',
        "reason": "NotFound",
        "details": {"name": "nothing", "group": "apps", "kind": "deployments"},
        "code": 404,
    }


def test_a_selector_that_does_not_match_the_template_is_422_invalid(kube):
    body = deployment()
    body["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ApiException) as raised:
        kube.apps.patch_namespaced_deployment("svc", "default", body, **APPLY)
    status = error_body(raised)
    assert (raised.value.status, status["reason"]) == (422, "Invalid")
    assert status["message"].startswith('Deployment.apps "svc" is invalid: spec.template.metadata')
    assert status["details"]["causes"][0]["field"] == "spec.template.metadata.labels"


def test_applying_into_a_missing_namespace_is_a_404(kube):
    with pytest.raises(ApiException) as raised:
        kube.core.patch_namespaced_config_map("cm", "elsewhere", config_map("cm"), **APPLY)
    assert raised.value.status == 404
    assert error_body(raised)["message"] == 'namespaces "elsewhere" not found'


def test_quantities_come_back_as_the_api_server_writes_them(kube):
    body = deployment()
    resources = body["spec"]["template"]["spec"]["containers"][0]["resources"]
    resources["requests"] = {"cpu": "4000m", "memory": "16384Mi"}
    resources["limits"] = {"cpu": "4.5", "memory": "16384Mi", "nvidia.com/gpu": 1}
    applied = kube.apps.patch_namespaced_deployment("svc", "default", body, **APPLY)
    read = applied.spec.template.spec.containers[0].resources
    assert read.requests == {"cpu": "4", "memory": "16Gi"}
    assert read.limits == {"cpu": "4500m", "memory": "16Gi", "nvidia.com/gpu": "1"}


def test_only_server_side_apply_is_a_patch_the_fake_takes(kube):
    with pytest.raises(ApiException) as raised:
        kube.core.patch_namespaced_config_map("cm", "default", {"data": {"a": "1"}})
    assert raised.value.status == 415


def test_deleting_the_root_config_map_collects_everything_it_owns(kube):
    root = kube.core.patch_namespaced_config_map(
        "svc-wharf", "default", config_map("svc-wharf"), **APPLY
    )
    owners = {"ownerReferences": owned_by(root)}
    kube.core.patch_namespaced_secret(
        "svc-secrets", "default", secret("svc-secrets", {"k": "v"}, **owners), **APPLY
    )
    kube.apps.patch_namespaced_deployment("svc", "default", deployment(**owners), **APPLY)
    kube.cluster.settle()
    assert len(kube.core.list_namespaced_pod("default", label_selector="app=svc").items) == 2

    kube.core.delete_namespaced_config_map("svc-wharf", "default", propagation_policy="Background")
    kube.cluster.settle()
    terminating = kube.core.list_namespaced_pod("default", label_selector="app=svc").items
    assert kube.apps.list_namespaced_deployment("default").items == []
    assert kube.core.list_namespaced_secret("default").items == []
    assert [pod.metadata.deletion_timestamp is not None for pod in terminating] == [True, True]
    kube.cluster.advance(60)  # the pods' grace
    kube.cluster.settle()
    assert kube.core.list_namespaced_pod("default").items == []


def test_a_foreground_deletion_keeps_the_owner_until_its_dependents_are_gone(kube):
    root = kube.core.patch_namespaced_config_map(
        "svc-wharf", "default", config_map("svc-wharf"), **APPLY
    )
    kube.apps.patch_namespaced_deployment(
        "svc", "default", deployment(ownerReferences=owned_by(root)), **APPLY
    )
    kube.cluster.settle()
    kube.core.delete_namespaced_config_map("svc-wharf", "default", propagation_policy="Foreground")
    kube.cluster.settle()
    waiting = kube.core.read_namespaced_config_map("svc-wharf", "default")
    assert waiting.metadata.deletion_timestamp is not None
    assert waiting.metadata.finalizers == ["foregroundDeletion"]
    kube.cluster.finish_terminating()
    kube.cluster.settle()
    assert kube.core.list_namespaced_config_map("default").items == []
    assert kube.apps.list_namespaced_deployment("default").items == []


def test_stopping_ends_open_watches_and_leaves_no_thread():
    before = set(threading.enumerate())
    cluster = FakeCluster()
    cluster.start()
    client = cluster.api_client()
    core = kubernetes.client.CoreV1Api(client)
    ended = threading.Event()

    def follow() -> None:
        try:
            for _ in kubernetes.watch.Watch().stream(
                core.list_namespaced_pod, "default", timeout_seconds=30
            ):
                pass
        except Exception:  # the connection closing under the watch is the expected end
            pass
        ended.set()

    follower = threading.Thread(target=follow)
    follower.start()
    core.list_node()
    cluster.stop()
    follower.join(timeout=10)
    client.close()
    assert ended.is_set()
    assert set(threading.enumerate()) == before
