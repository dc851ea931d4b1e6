"""Workspace quotas: the pure rules as tables, then through the real REST API."""

from __future__ import annotations

from collections import Counter

import pytest

from contracts.spec import parse_spec
from controlplane.services.models import Service
from controlplane.workspaces.models import Workspace
from controlplane.workspaces.quota_checks import check_quotas
from controlplane.workspaces.quotas import Footprint, Quotas, excess, footprint
from tests.api_support import client_for

GPU2 = {"name": "g", "containers": [{"image": "x", "command": "x"}],
        "metadata": {"instance": 3, "gpu": 2}}  # fmt: skip
PD = {"name": "pd", "llm": {"engine": "vllm", "model": "/m", "pd": {
    "prefill": {"instance": 1, "gpu": 2}, "decode": {"instance": 2, "gpu": 1}}}}  # fmt: skip
ASCEND = {"name": "a", "llm": {"engine": "vllm-ascend", "model": "/m"},
          "metadata": {"instance": 2, "npu": 4}}  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "running", "expected"),
    [
        (GPU2, True, Footprint(1, 3, Counter(gpu=6))),
        (GPU2, False, Footprint(1, 0, Counter())),  # a stopped service holds no cards
        (PD, True, Footprint(1, 3, Counter(gpu=4))),  # per role: 1×2 + 2×1
        (ASCEND, True, Footprint(1, 2, Counter(npu=8))),
        ({"name": "c", "containers": [{"image": "x", "command": "x"}]}, True, Footprint(1, 1)),
    ],
)
def test_what_a_service_holds(spec, running, expected):
    assert footprint(parse_spec(spec), running) == expected


NONE = Footprint()
ONE = Footprint(1, 1, Counter(gpu=1))


@pytest.mark.parametrize(
    ("quotas", "others", "before", "after", "over"),
    [
        (Quotas(), Footprint(99, 99, Counter(gpu=99)), NONE, ONE, set()),  # no quotas
        (Quotas(services=2), Footprint(2), NONE, ONE, {"quotas.services"}),
        (Quotas(services=2), Footprint(1), NONE, ONE, set()),
        (Quotas(instances=4), Footprint(1, 3), NONE, Footprint(1, 2), {"quotas.instances"}),
        (Quotas(cards={"gpu": 4}), Footprint(1, 1, Counter(gpu=3)), NONE,
         Footprint(1, 1, Counter(gpu=2)), {"quotas.cards.gpu"}),
        (Quotas(cards={"gpu": 4}), Footprint(1, 1, Counter(gpu=3)), NONE,
         Footprint(1, 1, Counter(npu=8)), set()),  # NPUs have no quota here
        (Quotas(cards={"npu": 0}), NONE, NONE, Footprint(1, 1, Counter(npu=1)),
         {"quotas.cards.npu"}),
        # An update that takes less is never refused, even past a lowered quota.
        (Quotas(instances=1), Footprint(1, 3), Footprint(1, 4), Footprint(1, 2), set()),
        # An existing service counts once: updating it is not a new service.
        (Quotas(services=1), Footprint(0), ONE, ONE, set()),
        (Quotas(services=1, instances=1, cards={"gpu": 1}), Footprint(1, 1, Counter(gpu=1)),
         NONE, ONE, {"quotas.services", "quotas.instances", "quotas.cards.gpu"}),
    ],
)  # fmt: skip
def test_which_quotas_a_change_would_pass(quotas, others, before, after, over):
    assert set(excess(quotas, others, before, after, "ws")) == over


def test_the_refusal_has_the_figures():
    problems = excess(Quotas(cards={"gpu": 4}), Footprint(1, 1, Counter(gpu=3)), NONE,
                      Footprint(1, 1, Counter(gpu=2)), "team")  # fmt: skip
    assert problems == {
        "quotas.cards.gpu": [
            "this needs 2 GPU(s); the other services of workspace 'team' hold 3 of its quota of 4"
        ]
    }


# --- through the API --------------------------------------------------------------------------


def custom(name: str, instances: int = 1) -> dict:
    return {"name": name, "containers": [{"image": "busybox", "command": "true"}],
            "metadata": {"instance": instances}}  # fmt: skip


@pytest.mark.django_db
def test_admins_set_quotas_and_deploys_past_them_are_refused_by_name():
    admin = client_for("boss", role="admin", workspace="q")
    developer = client_for("dev", role="developer", workspace="q")
    quotas = {"services": 2, "instances": 3}
    assert developer.patch("/api/v1/workspaces/q", {"quotas": quotas},
                           format="json").status_code == 403  # fmt: skip
    set_ = admin.patch("/api/v1/workspaces/q", {"quotas": quotas}, format="json")
    assert set_.json()["quotas"] == {"services": 2, "instances": 3, "cards": {},
                                     "queued_items": None}  # fmt: skip
    assert developer.post("/api/v1/services", custom("one", 2), format="json").status_code == 201
    refused = developer.post("/api/v1/services", custom("two", 2), format="json")
    assert refused.status_code == 400
    assert refused.json()["detail"] == (
        "Over the quota of workspace 'q' (instances); nothing was saved."
    )
    assert refused.json()["errors"] == {
        "quotas.instances": [
            "this needs 2 instance(s); the other services of workspace 'q' hold 2 of its quota of 3"
        ]
    }
    assert not Service.objects.filter(name="two").exists()
    assert developer.post("/api/v1/services", custom("two", 1), format="json").status_code == 201
    third = developer.post("/api/v1/services", custom("three", 0), format="json")
    assert set(third.json()["errors"]) == {"quotas.services"}
    # Growing one past the quota is refused; stopping frees its instances for another.
    grown = developer.put("/api/v1/services/two", custom("two", 2), format="json")
    assert grown.status_code == 400 and set(grown.json()["errors"]) == {"quotas.instances"}
    assert developer.post("/api/v1/services/one/stop").status_code == 202
    assert developer.put("/api/v1/services/two", custom("two", 3), format="json").status_code == 200
    restart = developer.post("/api/v1/services/one/start")
    assert restart.status_code == 400 and set(restart.json()["errors"]) == {"quotas.instances"}
    used = admin.get("/api/v1/workspaces/q").json()["used"]
    assert used == {"services": 2, "instances": 3, "cards": {}, "queued_items": 0}
    # A lowered quota stops nothing and refuses only growth.
    admin.patch("/api/v1/workspaces/q", {"quotas": {"instances": 1}}, format="json")
    assert developer.put("/api/v1/services/two", custom("two", 2), format="json").status_code == 200


@pytest.mark.django_db
def test_a_workspace_without_quotas_reads_nothing_else_and_one_with_a_quota_still_counts(
    django_assert_num_queries,
):
    """Unbounded (the default), a write's check reads the workspace's quotas and no service;
    a quota set since bounds the very next write."""
    admin = client_for("boss", role="admin", workspace="q")
    for name in ("one", "two"):
        assert admin.post("/api/v1/services", custom(name, 1), format="json").status_code == 201
    workspace = Workspace.objects.get(name="q")
    with django_assert_num_queries(1):
        check_quotas(workspace, parse_spec(custom("three", 1)), running=True)
    admin.patch("/api/v1/workspaces/q", {"quotas": {"instances": 2}}, format="json")
    refused = admin.post("/api/v1/services", custom("three", 1), format="json")
    assert refused.status_code == 400 and set(refused.json()["errors"]) == {"quotas.instances"}


@pytest.mark.django_db
def test_bad_quotas_are_named_and_nothing_is_saved():
    admin = client_for("boss", role="admin", workspace="q")
    bad = admin.patch("/api/v1/workspaces/q", {"quotas": {
        "services": -1, "instances": "3", "cards": {"gpu": 1.5, "tpu": 1}, "disks": 2}},
        format="json")  # fmt: skip
    assert bad.status_code == 400
    assert set(bad.json()["errors"]) == {
        "quotas.services",
        "quotas.instances",
        "quotas.cards.gpu",
        "quotas.cards.tpu",
        "quotas.disks",
    }
    assert admin.get("/api/v1/workspaces/q").json()["quotas"] == {
        "services": None,
        "instances": None,
        "cards": {},
        "queued_items": None,
    }
    cards = admin.patch("/api/v1/workspaces/q", {"quotas": {"cards": {"gpu": 8, "npu": 0}}},
                        format="json")  # fmt: skip
    assert cards.json()["quotas"]["cards"] == {"gpu": 8, "npu": 0}
    cleared = admin.patch("/api/v1/workspaces/q", {"quotas": {"cards": {"gpu": None}}},
                          format="json")  # fmt: skip
    assert cleared.json()["quotas"]["cards"] == {"npu": 0}


@pytest.mark.django_db
def test_staff_set_ceilings_and_admins_only_divide_what_is_below():
    staff = client_for("ops", staff=True, role="viewer", workspace="q")
    admin = client_for("boss", role="admin", workspace="q")
    developer = client_for("dev", role="developer", workspace="q")
    # An admin cannot give the workspace more: the ceilings are staff's.
    raised = admin.patch("/api/v1/workspaces/q", {"ceilings": {"instances": 100}}, format="json")
    assert raised.status_code == 403 and "Only staff" in raised.json()["detail"]
    ceilings = {"ceilings": {"instances": 2, "cards": {"gpu": 4}}}
    set_ = staff.patch("/api/v1/workspaces/q", ceilings, format="json")
    assert set_.status_code == 200
    assert set_.json()["ceilings"] == {"services": None, "instances": 2, "cards": {"gpu": 4},
                                       "queued_items": None}  # fmt: skip
    assert set_.json()["limits"]["instances"] == 2  # no quota of its own: the ceiling holds
    past = {"quotas": {"instances": 3, "cards": {"gpu": 8}}}
    over = admin.patch("/api/v1/workspaces/q", past, format="json")
    assert over.status_code == 400
    assert set(over.json()["errors"]) == {"quotas.instances", "quotas.cards.gpu"}
    assert "ceiling staff set" in over.json()["errors"]["quotas.instances"][0]
    assert admin.get("/api/v1/workspaces/q").json()["quotas"]["instances"] is None  # unsaved
    within = admin.patch("/api/v1/workspaces/q", {"quotas": {"instances": 1}}, format="json")
    assert within.status_code == 200 and within.json()["limits"]["instances"] == 1
    assert developer.post("/api/v1/services", custom("one", 1), format="json").status_code == 201
    refused = developer.post("/api/v1/services", custom("two", 1), format="json")
    assert set(refused.json()["errors"]) == {"quotas.instances"}
    # Staff lowering a ceiling under a quota: the lower one is enforced.
    admin.patch("/api/v1/workspaces/q", {"quotas": {"instances": 2}}, format="json")
    staff.patch("/api/v1/workspaces/q", {"ceilings": {"instances": 1}}, format="json")
    assert admin.get("/api/v1/workspaces/q").json()["limits"]["instances"] == 1
    again = developer.post("/api/v1/services", custom("two", 1), format="json")
    assert set(again.json()["errors"]) == {"quotas.instances"}


@pytest.mark.parametrize(
    ("quotas", "ceilings", "enforced"),
    [
        (Quotas(), Quotas(), Quotas()),
        (Quotas(services=5), Quotas(), Quotas(services=5)),
        (Quotas(), Quotas(instances=3), Quotas(instances=3)),
        (Quotas(instances=2), Quotas(instances=3), Quotas(instances=2)),
        (Quotas(instances=4), Quotas(instances=3), Quotas(instances=3)),
        (Quotas(cards={"gpu": 8}), Quotas(cards={"gpu": 4, "npu": 2}),
         Quotas(cards={"gpu": 4, "npu": 2})),
    ],
)  # fmt: skip
def test_a_quota_is_capped_by_its_ceiling(quotas, ceilings, enforced):
    assert quotas.within(ceilings) == enforced
