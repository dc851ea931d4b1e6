"""EAS's query parameters read strictly (controlplane.eas_api.queries) and EAS's event types
(controlplane.eas_api.answers): pure, as tables."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from controlplane.eas_api import answers, queries
from controlplane.eas_api.errors import EasError, message_of

ITEMS = list(range(1, 8))


@pytest.mark.parametrize(
    ("params", "page", "number", "size"),
    [({}, ITEMS, 1, 100), ({"PageSize": "3"}, [1, 2, 3], 1, 3),
     ({"PageSize": "3", "PageNumber": "3"}, [7], 3, 3),
     ({"PageSize": "3", "PageNumber": "9"}, [], 9, 3)],
)  # fmt: skip
def test_a_page_is_taken_from_its_number_and_size(params, page, number, size):
    assert queries.page(params, ITEMS, "PageNumber", "PageSize") == (page, number, size)


@pytest.mark.parametrize("params", [{"PageSize": "0"}, {"PageSize": "101"},
                                    {"PageNumber": "-1"}, {"PageSize": "ten"}])  # fmt: skip
def test_a_page_outside_the_bounds_is_refused_naming_it(params):
    with pytest.raises(EasError) as refused:
        queries.page(params, ITEMS, "PageNumber", "PageSize")
    assert refused.value.eas_code == "InvalidParameter"
    assert next(iter(params)) in refused.value.message


@pytest.mark.parametrize(
    ("params", "known", "refused"),
    [({"A": "1"}, ("A",), False), ({"ClusterId": "cn-hangzhou"}, (), False),
     ({"QuotaId": "q"}, ("A",), True)],
)  # fmt: skip
def test_only_the_parameters_a_call_takes_are_taken(params, known, refused):
    if refused:
        with pytest.raises(EasError, match="QuotaId"):
            queries.only(params, known)
    else:
        queries.only(params, known)


@pytest.mark.parametrize(
    ("text", "labels"),
    [(None, {}), ('{"team": "search"}', {"team": "search"})],
)
def test_labels_are_a_json_object_of_strings(text, labels):
    assert queries.labels({} if text is None else {"Labels": text}, "Labels") == labels


@pytest.mark.parametrize("text", ["team=search", '["team"]', '{"n": 1}'])
def test_labels_of_another_shape_are_refused(text):
    with pytest.raises(EasError, match="Labels"):
        queries.labels({"Labels": text}, "Labels")


@pytest.mark.parametrize(
    ("text", "when"),
    [("2026-01-31 12:00:00", datetime(2026, 1, 31, 12, tzinfo=UTC)),
     ("2026-01-31T12:00:00Z", datetime(2026, 1, 31, 12, tzinfo=UTC))],
)  # fmt: skip
def test_a_time_is_eas_form_or_iso_in_utc(text, when):
    assert queries.moment({"StartTime": text}, "StartTime") == when


@pytest.mark.parametrize(
    ("reason", "kind"),
    [("Created", "Normal"), ("StopRequested", "Normal"), ("InstanceFailed", "Warning"),
     ("Unhealthy", "Warning"), ("FieldIgnored", "Warning")],
)  # fmt: skip
def test_events_are_warnings_when_something_went_wrong(reason, kind):
    assert answers.event_type(reason) == kind


@pytest.mark.parametrize(
    ("data", "message"),
    [({"detail": "The spec is invalid.", "errors": {"metadata.instance": ["at least 0"]}},
      "The spec is invalid. metadata.instance: at least 0"),
     ({"detail": "Not found."}, "Not found."), ({"name": ["taken"]}, "name: taken")],
)  # fmt: skip
def test_a_v1_refusal_is_one_eas_message_naming_each_field(data, message):
    assert message_of(data) == message
