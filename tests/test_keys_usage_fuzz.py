"""Arbitrary input to the API-key and usage endpoints (hypothesis, a fixed seed): never a 5xx,
every 4xx in the API's one error shape saying what is wrong, nothing written on a 4xx. Real
endpoints, the configured database."""

import json
from contextlib import contextmanager
from datetime import datetime
from urllib.parse import quote, urlencode

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from hypothesis import event, given
from hypothesis import strategies as st
from rest_framework.test import APIClient

from controlplane.services.models import Service
from controlplane.tokens.models import ApiKey, ApiToken
from tests.api_support import default_workspace, member
from tests.fuzz_support import SCALARS, fuzz
from tests.fuzz_support import json_values as any_json

pytestmark = pytest.mark.django_db

FUZZ = fuzz(200)

EDGE_DATES = [
    "9999-12-31T23:59:59+14:00", "9999-12-31T23:59:59-14:00", "0001-01-01",
    "0001-01-01T00:00:00+01:00", "10000-01-01T00:00:00Z", "1969-12-31T23:59:59Z",
    "1970-01-01T00:00:00Z", "2030-02-30T00:00:00Z", "2030-01-01T00:00:00+25:00",
    "2030-01-01T00:00:00", "2100-01-01T00:00:00.000Z", "1e30", "-1", "",
]  # fmt: skip
EDGE_TEXT = ["", " ", "qwen", "llama", "nope", "-", "k1", "k" + "9" * 11, "x" * 64, "a\x00b",
             "\ud800", "tab\there", "minute", "hour", "day", "week"]  # fmt: skip
EDGE_NUMBERS = [0, -1, 1, 2**31 - 1, 2**31, 2**63, -(2**63), 10**30, 1.5, 1e30, True, False]
json_values = any_json(SCALARS | st.sampled_from(EDGE_DATES + EDGE_TEXT + EDGE_NUMBERS))
service_lists = st.lists(st.sampled_from(EDGE_TEXT) | st.text(max_size=70), max_size=6) | st.lists(
    st.just("qwen"), min_size=99, max_size=102
)
key_fields = {
    "name": st.sampled_from(EDGE_TEXT) | st.text(max_size=120) | json_values,
    "services": st.none() | service_lists | json_values,
    "expires_at": st.sampled_from(EDGE_DATES) | json_values,
    "expires_in": st.sampled_from(EDGE_NUMBERS) | json_values,
    **{limit: st.sampled_from(EDGE_NUMBERS) | json_values for limit in ("rpm", "tpm")},
    "max_concurrency": st.sampled_from(EDGE_NUMBERS) | json_values,
}
# Bodies a client means to be right, so that keys are also created (and checked) often.
printable = st.characters(codec="utf-8", exclude_categories=("Cc", "Cs"))
limits = st.integers(1, 2**31 - 1)
valid_fields = {
    "services": st.none() | st.lists(st.sampled_from(["qwen"]), min_size=1, max_size=3),
    "expires_in": limits,
    "expires_at": st.builds(
        lambda when, offset: when.isoformat() + offset,
        st.datetimes(min_value=datetime(2030, 1, 1), max_value=datetime(9998, 12, 31, 23, 59)),
        st.sampled_from(["", "Z", "+14:00", "-14:00", "+05:30"]),
    ),
    **{limit: limits for limit in ("rpm", "tpm", "max_concurrency")},
}
valid_bodies = st.fixed_dictionaries(
    {"name": st.text(printable, min_size=1, max_size=100).filter(str.strip)},
    optional=valid_fields,
).filter(lambda body: not {"expires_at", "expires_in"} <= set(body))
key_bodies = st.one_of(
    valid_bodies,
    st.builds(  # one field off
        lambda body, field, value: {**body, field: value},
        valid_bodies,
        st.sampled_from(sorted(key_fields)),
        json_values,
    ),
    st.fixed_dictionaries({}, optional=key_fields),
    st.builds(
        lambda known, extra: {**extra, **known},
        st.fixed_dictionaries({}, optional=key_fields),
        st.dictionaries(st.text(max_size=80) | st.just("\ud800"), json_values, max_size=3),
    ),
    json_values,
)
USAGE_PARAMETERS = ["since", "until", "group", "service", "key", "limit", "format"]
query_values = st.sampled_from(EDGE_DATES + EDGE_TEXT + [str(n) for n in EDGE_NUMBERS]) | st.text(
    max_size=30
)
query_pairs = st.lists(
    st.tuples(st.sampled_from(USAGE_PARAMETERS) | st.text(max_size=10), query_values), max_size=5
)
raw_queries = st.text(alphabet="%&=+;#?abdeginkrstuyT:Z.-0123456789fF ", max_size=40)
# Ids the route can carry (one path segment: not empty, no "/"); other paths are no key route.
key_ids = st.text(min_size=1, max_size=30).filter(lambda s: "/" not in s) | st.sampled_from(
    ["k1", "1", "k" + "9" * 5000, "k2147483648", "k-1", "k٣", "k 1", "%00"]
)


@pytest.fixture
def alice() -> APIClient:
    user = get_user_model().objects.create_user("alice")
    client = APIClient()
    client.credentials(
        HTTP_AUTHORIZATION=f"Bearer {ApiToken.issue(user, member(user, 'owner'), 'test')}"
    )
    Service.objects.create(
        workspace=default_workspace(), name="qwen", spec={"name": "qwen"}, owner=user
    )
    ApiKey.issue(user, default_workspace(), "existing")
    return client


@contextmanager
def rolled_back():
    """One example's writes undone, so that examples do not see each other's."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


def assert_client_error(response) -> None:
    """A 4xx that says what is wrong: a detail, and each named field's messages."""
    assert 400 <= response.status_code < 500, response.content[:500]
    body = response.json()
    assert isinstance(body["detail"], str) and body["detail"]
    errors = body.get("errors", {})
    assert isinstance(errors, dict)
    assert response.status_code != 400 or "errors" in body or "JSON" in body["detail"]
    for field, messages in errors.items():
        assert isinstance(field, str) and messages
        assert all(isinstance(message, str) and message for message in messages)


@FUZZ
@given(body=key_bodies)
def test_creating_a_key_from_any_json_is_a_key_or_a_4xx_that_writes_nothing(alice, body):
    with rolled_back():
        before = ApiKey.objects.count()
        raw = json.dumps(body)  # ASCII: lone surrogates travel as \ud800, as a client sends them
        response = alice.post("/api/v1/keys", raw, content_type="application/json")
        event(f"status {response.status_code}")  # --hypothesis-show-statistics: is 201 reached?
        if response.status_code == 201:
            assert ApiKey.objects.count() == before + 1
            stored = ApiKey.objects.get(pk=int(response.json()["id"][1:]))
            assert stored.name == body["name"].strip()
            assert (stored.rpm, stored.tpm) == (body.get("rpm"), body.get("tpm"))
        else:
            assert_client_error(response)
            assert ApiKey.objects.count() == before


@FUZZ
@given(pairs=query_pairs, raw=raw_queries)
def test_any_usage_query_is_an_answer_or_a_4xx_naming_the_parameter(alice, pairs, raw):
    with rolled_back():
        # a lone surrogate goes as the bytes of one, which are no UTF-8
        for query in (urlencode(pairs, errors="surrogatepass"), raw):
            response = alice.get(f"/api/v1/usage?{query}")
            event(f"status {response.status_code}")
            if response.status_code != 200:
                assert_client_error(response)
                assert response.json().get("errors"), response.content[:500]


@FUZZ
@given(pairs=query_pairs, raw=raw_queries)
def test_any_query_of_the_key_list_is_the_list_or_a_4xx(alice, pairs, raw):
    with rolled_back():
        # a lone surrogate goes as the bytes of one, which are no UTF-8
        for query in (urlencode(pairs, errors="surrogatepass"), raw):
            response = alice.get(f"/api/v1/keys?{query}")
            if response.status_code == 200:
                assert [key["name"] for key in response.json()] == ["existing"]
            else:
                assert_client_error(response)


@FUZZ
@given(key_id=key_ids)
def test_any_key_id_is_a_key_or_a_404_and_revokes_nothing_else(alice, key_id):
    with rolled_back():
        (existing,) = ApiKey.objects.all()
        path = f"/api/v1/keys/{quote(key_id, safe='')}"
        looked_up, deleted = alice.get(path), alice.delete(path)
        named = key_id in (existing.public_id, str(existing.pk))
        assert (looked_up.status_code, deleted.status_code) == ((200, 204) if named else (404, 404))
        if not named:
            assert_client_error(deleted)
        existing.refresh_from_db()
        assert (existing.revoked_at is not None) == named
        assert ApiKey.objects.count() == 1
