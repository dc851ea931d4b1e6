"""The operator's grants through the API (real database): a developer's spec that asks for
shared ground its workspace is not granted is a 403 naming the field and the grant, and
nothing is saved; staff grant per workspace, its members read what is granted, and no one
else changes it."""

from __future__ import annotations

import pytest

from controlplane.services.models import Service
from controlplane.workspaces.models import Workspace
from tests.api_support import client_for, grant

pytestmark = pytest.mark.django_db

NFS = {"name": "shared", "llm": {"engine": "vllm-cpu", "model": "/data/tiny"},
       "storage": [{"mount_path": "/data",
                    "nfs": {"server": "nas", "path": "/exports/m"}}]}  # fmt: skip
NIXL = {"name": "pd", "containers": [{"image": "attacker/any:1"}],
        "llm": {"engine": "vllm", "model": "tiny-llama",
                "pd": {"prefill": {"gpu": 1}, "decode": {"gpu": 1},
                       "kv_connector": "NixlConnector"}}}  # fmt: skip
GRANTS = "/api/v1/workspaces/default/grants"


def test_a_developer_spec_asking_for_an_ungranted_export_is_refused_and_nothing_saved(api):
    answer = api.post("/api/v1/services", NFS, format="json")
    assert answer.status_code == 403
    body = answer.json()
    assert "grants.nfs" in body["errors"]["storage[0].nfs"][0]
    assert "'nas:/exports/m'" in body["errors"]["storage[0].nfs"][0]
    assert not Service.objects.filter(name="shared").exists()


def test_a_prefill_decode_spec_with_its_own_image_needs_the_host_network_grant(api, store):
    answer = api.post("/api/v1/services", NIXL, format="json")
    assert answer.status_code == 403
    assert "grants.host_network" in answer.json()["errors"]["containers[0].image"][0]
    grant(host_network=True)
    assert api.post("/api/v1/services", NIXL, format="json").status_code == 201


def test_staff_grant_and_members_read_but_cannot_change(api, store):
    staff = client_for("ops", staff=True, role="viewer")
    admin = client_for("wendy", role="admin")
    granted = {"nfs": ["nas:/exports"], "resource_groups": ["h200"]}
    assert admin.put(GRANTS, granted, format="json").status_code == 403
    answer = staff.put(GRANTS, granted, format="json")
    assert answer.status_code == 200, answer.json()
    read = api.get(GRANTS).json()  # a developer of the workspace
    assert read["nfs"] == ["nas:/exports"] and read["host_network"] is False
    assert api.post("/api/v1/services", NFS, format="json").status_code == 201
    # A later update may not add what is not granted.
    update = {**NFS, "storage": [{"mount_path": "/data",
                                  "nfs": {"server": "nas", "path": "/etc"}}]}  # fmt: skip
    assert api.put("/api/v1/services/shared", update, format="json").status_code == 403


def test_a_revoked_grant_refuses_a_rollback_to_the_version_that_used_it(api, store):
    grant(nfs=["nas:/exports"])
    assert api.post("/api/v1/services", NFS, format="json").status_code == 201
    plain = {**NFS, "storage": [], "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
    assert api.put("/api/v1/services/shared", plain, format="json").status_code == 200
    grant()  # every grant closed again
    answer = api.post("/api/v1/services/shared/rollback", {"version": 1}, format="json")
    assert answer.status_code == 403
    assert "storage[0].nfs" in answer.json()["errors"]


def test_another_workspace_grants_are_not_found(api):
    Workspace.objects.create(name="team-b")
    assert api.get("/api/v1/workspaces/team-b/grants").status_code == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"nfs": ["nas"]}, "grants.nfs"),
        ({"pvc": [{"claim": "wharf-models"}]}, "grants.pvc[0].claim"),
        ({"host_network": 1}, "grants.host_network"),
        ({"sudo": True}, "grants.sudo"),
        ([], "grants"),
    ],
)
def test_bad_grants_are_a_400_naming_the_field(settings, body, field):
    settings.WHARF_K8S_MODEL_CLAIM = "wharf-models"
    staff = client_for("ops", staff=True)
    answer = staff.put(GRANTS, body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["errors"]
    assert Workspace.objects.get(name="default").grants == {}


def test_on_the_process_runtime_a_developers_own_command_is_refused(api, settings, store):
    """Engines of the process runtime run on the node's own account, which holds the
    control plane's keys: a workspace runs no code of its choosing there ungranted."""
    settings.WHARF_RUNTIME = "process"
    reader = {"name": "reader", "containers": [{"command": "cat $WHARF_HOME/secrets_key"}],
              "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}  # fmt: skip
    answer = api.post("/api/v1/services", reader, format="json")
    assert answer.status_code == 403
    assert "grants.process_code" in answer.json()["errors"]["containers[0].command"][0]
    plain = {"name": "plain", "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}
    assert api.post("/api/v1/services", plain, format="json").status_code == 201
    grant(process_code=True)
    assert api.post("/api/v1/services", reader, format="json").status_code == 201


def test_staff_set_grants_in_the_django_admin_checked_as_the_api_checks_them(client, settings):
    from django.contrib.auth import get_user_model

    settings.WHARF_K8S_MODEL_CLAIM = "wharf-models"
    root = get_user_model().objects.create_superuser("root", password="pw-for-the-admin")
    client.force_login(root)
    workspace = Workspace.objects.get_or_create(name="default")[0]
    url = f"/admin/workspaces/workspace/{workspace.pk}/change/"
    form = {"name": "default", "quota_cards": "{}", "ceiling_cards": "{}",
            "members-TOTAL_FORMS": "0", "members-INITIAL_FORMS": "0"}  # fmt: skip
    bad = client.post(url, {**form, "grants": '{"nfs": ["nas"], "pvc": []}'})
    assert bad.status_code == 200 and "grants.nfs" in bad.content.decode()
    reserved = client.post(url, {**form, "grants": '{"pvc": [{"claim": "wharf-models"}]}'})
    assert reserved.status_code == 200 and "Wharf&#x27;s own claim" in reserved.content.decode()
    assert Workspace.objects.get(pk=workspace.pk).grants == {}
    good = client.post(url, {**form, "grants": '{"nfs": ["nas:/exports"]}'})
    assert good.status_code == 302, good.content.decode()[:2000]
    assert Workspace.objects.get(pk=workspace.pk).parsed_grants().nfs == ["nas:/exports"]


LOCAL = {"name": "local-image", "containers": [{"image": "127.0.0.1:5000/team/vllm:1"}],
         "llm": {"engine": "vllm-cpu", "model": "tiny-llama"}}  # fmt: skip


def test_an_image_from_a_loopback_registry_is_refused_until_granted(api, store):
    answer = api.post("/api/v1/services", LOCAL, format="json")
    assert answer.status_code == 403
    why = answer.json()["errors"]["containers[0].image"][0]
    assert "127.0.0.1:5000" in why and "grants.registries" in why
    grant(registries=["127.0.0.1:5000"])
    assert api.post("/api/v1/services", LOCAL, format="json").status_code == 201


@pytest.mark.parametrize(
    ("resolved", "grants", "refused"),
    [
        (["10.0.0.7"], {}, True),
        (["203.0.113.9", "fd00::5"], {}, True),  # one local address is enough
        (["::ffff:169.254.169.254"], {}, True),
        (["10.0.0.7"], {"registries": ["registry.corp"]}, False),
        (["10.0.0.7"], {"registries": ["registry.corp:5000"]}, True),
        (["8.8.8.8"], {}, False),
        ([], {}, False),  # no answer: the pull says why
    ],
)
def test_a_registry_name_that_resolves_to_a_local_address_is_refused_on_the_node(
    resolved, grants, refused
):
    from contracts.spec import parse_spec
    from controlplane.workspaces.policy import registry_refusals

    spec = parse_spec({**LOCAL, "containers": [{"image": "registry.corp/team/vllm:1"}]})
    grant(**grants)
    workspace = Workspace.objects.get(name="default")
    found = registry_refusals(spec, workspace, resolve=lambda host: resolved)
    assert bool(found) is refused
    if refused:
        assert "resolves to" in found["containers[0].image"][0]
        assert "grants.registries" in found["containers[0].image"][0]


def test_the_nodes_resolver_answers_with_addresses():
    from controlplane.workspaces.policy import addresses

    assert "127.0.0.1" in addresses("localhost")
    assert addresses("no-such-host.invalid") == []
