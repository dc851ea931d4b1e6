"""Facts kept per service and generation (controlplane.services.spec_memo): each spec is
parsed once per generation in a process, and a changed, deleted or new service is read again."""

from __future__ import annotations

import pytest

from controlplane.services import spec_memo
from controlplane.services.models import Service
from tests.api_support import default_workspace

pytestmark = pytest.mark.django_db

derived: list[str] = []


def image(service: Service) -> str:
    derived.append(service.name)
    return service.spec["containers"][0]["image"]


def spec(name: str, image: str) -> dict:
    return {"name": name, "containers": [{"image": image, "command": "c", "port": 8000}]}


def test_a_spec_is_read_once_per_generation_and_a_gone_service_is_left_out():
    derived.clear()
    workspace = default_workspace()
    for name in ("a", "b"):
        Service.objects.create(name=name, workspace=workspace, spec=spec(name, f"{name}:1"))
    mine = Service.objects.filter(name__in=("a", "b", "c"))
    assert spec_memo.each(mine, image, "name") == [(("a",), "a:1"), (("b",), "b:1")]
    assert spec_memo.each(mine, image, "name") == [(("a",), "a:1"), (("b",), "b:1")]
    assert derived == ["a", "b"]  # the second read parsed nothing
    Service.objects.filter(name="a").update(spec=spec("a", "a:2"), generation=2)
    Service.objects.filter(name="b").delete()
    Service.objects.create(name="c", workspace=workspace, spec=spec("c", "c:1"))
    assert spec_memo.each(mine, image, "name") == [(("a",), "a:2"), (("c",), "c:1")]
    assert derived == ["a", "b", "a", "c"]


def test_a_full_table_starts_again_and_still_answers(monkeypatch):
    """Bounded: past KEPT facts the table is emptied before more are added (those this read
    already found are still answered)."""
    derived.clear()
    monkeypatch.setattr(spec_memo, "KEPT", 2)
    workspace = default_workspace()
    for name in ("d", "e"):
        Service.objects.create(name=name, workspace=workspace, spec=spec(name, f"{name}:1"))
    mine = Service.objects.filter(name__in=("d", "e", "f"))
    assert [fact for _, fact in spec_memo.each(mine, image)] == ["d:1", "e:1"]
    Service.objects.create(name="f", workspace=workspace, spec=spec("f", "f:1"))
    for _ in range(2):
        assert [fact for _, fact in spec_memo.each(mine, image)] == ["d:1", "e:1", "f:1"]
    assert derived == ["d", "e", "f", "d", "e"] and len(spec_memo._memo) <= 2
