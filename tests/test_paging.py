"""Pages of the long lists (controlplane.paging): services and nodes in name order, `limit` and
`after`, the Link to the next page and the total; a bad parameter named; the CLI reading every
page as one list."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from django.contrib.auth import get_user_model
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from controlplane import paging
from controlplane.nodes.models import Node
from controlplane.services.models import Instance, Service
from controlplane.tokens.models import ApiToken
from tests.api_support import default_workspace, member
from wharfcli.main import cli

pytestmark = pytest.mark.django_db
NAMES = ["e-svc", "a-svc", "d-svc", "b-svc", "c-svc"]


def _services(labels: dict | None = None) -> None:
    for name in NAMES:
        spec = {"name": name, "containers": [{"image": "i", "command": "c", "port": 8000}],
                **({"labels": labels} if labels and name != "c-svc" else {})}  # fmt: skip
        Service.objects.create(name=name, spec=spec, workspace=default_workspace())


def _pages(api, url: str) -> list[tuple[list[str], str, str | None]]:
    """Each page's names, its total and the next page's URL, following Link to the end."""
    pages = []
    while url:
        answer = api.get(url)
        assert answer.status_code == 200, answer.json()
        link = answer.headers.get("Link")
        pages.append(([row["name"] for row in answer.json()], answer["X-Total-Count"], link))
        url = link[1 : link.index(">")].removeprefix("http://testserver") if link else ""
    return pages


def test_services_come_in_pages_in_name_order(api):
    _services()
    pages = _pages(api, "/api/v1/services?limit=2")
    assert [names for names, _, _ in pages] == [["a-svc", "b-svc"], ["c-svc", "d-svc"], ["e-svc"]]
    assert {total for _, total, _ in pages} == {"5"}
    assert pages[0][2].endswith('?limit=2&after=b-svc>; rel="next"')
    assert pages[-1][2] is None
    whole = api.get("/api/v1/services")  # under the default page: one page, no Link
    assert [r["name"] for r in whole.json()] == sorted(NAMES) and "Link" not in whole


def test_a_label_selection_is_paged_too(api):
    _services(labels={"team": "ml"})
    pages = _pages(api, "/api/v1/services?label=team=ml&limit=3")
    assert [names for names, _, _ in pages] == [["a-svc", "b-svc", "d-svc"], ["e-svc"]]
    assert "label=team%3Dml" in pages[0][2]  # the selection rides along
    assert pages[0][1] == "4"


def test_nodes_come_in_pages_and_by_state(api):
    now = timezone.now()
    for i in range(5):
        Node.objects.create(name=f"gpu-{i}", address=f"10.0.0.{i}", heartbeat_at=now,
                            cordoned=i % 2 == 1)  # fmt: skip
    pages = _pages(api, "/api/v1/nodes?limit=2")
    assert [names for names, _, _ in pages] == [["gpu-0", "gpu-1"], ["gpu-2", "gpu-3"], ["gpu-4"]]
    cordoned = _pages(api, "/api/v1/nodes?state=cordoned&limit=1")
    assert [names for names, _, _ in cordoned] == [["gpu-1"], ["gpu-3"]]


def test_a_page_of_nodes_reads_only_its_own_nodes_instances(api):
    service = Service.objects.create(
        name="chat", workspace=default_workspace(),
        spec={"name": "chat", "containers": [{"image": "i", "command": "c", "port": 8000}]},
    )  # fmt: skip

    def grow(to: int) -> None:
        for i in range(Node.objects.count(), to):
            Node.objects.create(name=f"n-{i:03}", address=f"10.0.1.{i}",
                                heartbeat_at=timezone.now())  # fmt: skip
            Instance.objects.create(service=service, name=f"chat-{i:03}", node=f"n-{i:03}",
                                    runtime="process", spec_hash="h", state="ready")  # fmt: skip

    def page() -> tuple[list, int]:
        with CaptureQueriesContext(connection) as queries:
            rows = api.get("/api/v1/nodes?limit=2").json()
        # Instances are read for the page's nodes only, not the whole fleet's.
        read = [q["sql"] for q in queries if 'FROM "services_instance"' in q["sql"]]
        assert read and all("n-001" in sql and "n-002" not in sql for sql in read), read
        # In one query that leaves out what no page shows: the specs (each a JSON document).
        assert len(read) == 1 and '"services_service"."spec"' not in read[0], read
        return [(r["name"], [i["name"] for i in r["instances"]]) for r in rows], len(queries)

    grow(3)
    page()  # the first read of the workspace's specs (then kept per generation: spec_memo)
    small = page()
    grow(40)
    large = page()
    assert small[0] == large[0] == [("n-000", ["chat-000"]), ("n-001", ["chat-001"])]
    assert small[1] == large[1]  # the same queries, whatever the fleet's size


BAD = [("limit=0", "limit"), ("limit=1001", "limit"), ("limit=x", "limit"),
       ("after=" + "a" * 201, "after")]  # fmt: skip


@pytest.mark.parametrize(("query", "param"), BAD)
def test_a_bad_page_parameter_is_named(api, query, param):
    for path in ("services", "nodes"):
        answer = api.get(f"/api/v1/{path}?{query}")
        assert answer.status_code == 400 and param in answer.json()["errors"], answer.json()


@pytest.mark.django_db(transaction=True)
def test_the_cli_reads_every_page(live_server, monkeypatch, tmp_path):
    monkeypatch.setattr(paging, "DEFAULT_LIMIT", 2)  # the live server runs in this process
    _services()
    user = get_user_model().objects.create_user("pager")
    env = {"WHARF_API": live_server.url, "WHARF_TOKEN": ApiToken.issue(user, member(user), "cli"),
           "WHARF_CONFIG_DIR": str(tmp_path)}  # fmt: skip
    result = CliRunner().invoke(cli, ["services", "list", "-o", "json"], env=env)
    assert result.exit_code == 0, result.output
    assert [row["name"] for row in json.loads(result.output)] == sorted(NAMES)
