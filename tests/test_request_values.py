"""The pure checks behind the keys and usage APIs' 400s, table by table (no database)."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.http import QueryDict

from controlplane.tokens.api.errors import Invalid
from controlplane.tokens.api.values import (
    MAX_INT,
    echo,
    parameter_errors,
    positive_int,
    text,
    timestamp,
)
from controlplane.usage.api.query import parse_query

NOW = datetime(2030, 6, 1, 12, 0, tzinfo=UTC)
DAY_BEFORE = NOW - timedelta(days=1)


@pytest.mark.parametrize("value", [1, 600, MAX_INT])
def test_positive_int_takes_whole_numbers_within_the_column(value):
    assert positive_int(value) == value


@pytest.mark.parametrize("value", [0, -1, MAX_INT + 1, 2**63, True, False, 1.0, "5", None, [1]])
def test_positive_int_refuses_anything_else(value):
    with pytest.raises(ValueError, match="whole number"):
        positive_int(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "must be a string"),
        (7, "must be a string"),
        (None, "must be a string"),
        ("x" * 11, "at most 10 characters"),
        ("a\x00b", "control characters"),
        ("line\nbreak", "control characters"),
        ("\ud800", "control characters"),
    ],
)
def test_text_refuses_what_cannot_be_stored_or_answered(value, message):
    with pytest.raises(ValueError, match=message):
        text(value, 10)


@pytest.mark.parametrize("value", ["qwen", "x" * 10, "café ☕", "zero\u200bwidth"])
def test_text_takes_printable_strings_within_the_bound(value):
    assert text(value, 10) == value


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("2030-01-31T00:00:00Z", datetime(2030, 1, 31, tzinfo=UTC)),
        ("2030-01-31T00:00:00", datetime(2030, 1, 31, tzinfo=UTC)),  # naive: UTC
        ("2030-01-31", datetime(2030, 1, 31, tzinfo=UTC)),
        ("1970-01-01T00:00:00Z", datetime(1970, 1, 1, tzinfo=UTC)),
        ("9998-12-31T23:59:59+14:00", datetime(9998, 12, 31, 9, 59, 59, tzinfo=UTC)),
        ("2030-01-31T05:30:00+05:30", datetime(2030, 1, 31, tzinfo=UTC)),
    ],
)
def test_timestamps_in_range(value, expected):
    assert timestamp(value) == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("9999-12-31T23:59:59-14:00", "from 1970-01-01 to 9999-01-01"),  # year 10000 in UTC
        ("9999-06-01T00:00:00Z", "from 1970-01-01 to 9999-01-01"),
        ("0001-01-01", "from 1970-01-01 to 9999-01-01"),
        ("0001-01-01T00:00:00+01:00", "from 1970-01-01 to 9999-01-01"),  # year 0 in UTC
        ("1970-01-01T00:00:00+00:01", "from 1970-01-01 to 9999-01-01"),
        ("10000-01-01T00:00:00Z", "ISO 8601"),
        ("2030-02-30T00:00:00Z", "ISO 8601"),
        ("2030-01-01T00:00:00+25:00", "ISO 8601"),
        ("1e30", "ISO 8601"),
        ("-1", "ISO 8601"),
        ("2030-01-01T00:00:00" + "0" * 100, "ISO 8601"),
        (1e30, "ISO 8601"),
        (None, "ISO 8601"),
    ],
)
def test_timestamps_out_of_range_or_malformed(value, message):
    with pytest.raises(ValueError, match=message):
        timestamp(value)


@pytest.mark.parametrize(
    ("name", "echoed"),
    [("colour", "colour"), ("\ud800", "\\ud800"), ("x" * 65, "x" * 64 + "…"), ("", "")],
)
def test_echo_makes_a_users_field_name_safe_to_answer(name, echoed):
    assert echo(name) == echoed


@pytest.mark.parametrize(
    ("query", "errors"),
    [
        ("since=1&key=2", {}),
        ("", {}),
        ("limit=-1", {"limit": ["unknown parameter; this endpoint takes since, key"]}),
        ("since=1&since=2", {"since": ["given more than once"]}),
        ("=x", {"": ["unknown parameter; this endpoint takes since, key"]}),
    ],
)
def test_parameter_errors_name_unknown_and_repeated_parameters(query, errors):
    assert parameter_errors(QueryDict(query), ("since", "key")) == errors


def test_parameter_errors_of_an_endpoint_that_takes_none():
    errors = parameter_errors(QueryDict("a=1"), ())
    assert errors == {"a": ["unknown parameter; this endpoint takes none"]}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", (DAY_BEFORE, NOW, "hour", None, None)),
        ("group=minute&service=qwen&key=k7", (DAY_BEFORE, NOW, "minute", "qwen", "k7")),
        ("until=2030-01-02&key=-", (datetime(2030, 1, 1, tzinfo=UTC),
                                    datetime(2030, 1, 2, tzinfo=UTC), "hour", None, "-")),
        ("since=2030-01-01T00:00:00%2B01:00&group=day",
         (datetime(2030, 1, 1, tzinfo=timezone(timedelta(hours=1))), NOW, "day", None, None)),
        ("format=json&service=&key=", (DAY_BEFORE, NOW, "hour", None, None)),
    ],
)  # fmt: skip
def test_parse_query(query, expected):
    parsed = parse_query(QueryDict(query), NOW)
    assert (parsed.since, parsed.until, parsed.group, parsed.service, parsed.key) == expected


@pytest.mark.parametrize(
    ("query", "fields"),
    [
        ("until=1970-01-01T00:00:00Z", set()),  # the default since is a day earlier: allowed
        ("since=0001-01-01", {"since"}),
        ("until=0001-01-01T00:00:00Z", {"until"}),
        ("since=2031-01-01", {"since"}),  # after until, which defaults to now
        ("since=2020-01-01&group=minute", {"group"}),
        ("group=week&service=a%00b&key=k12345678901", {"group", "service", "key"}),
        ("service=" + "x" * 64, {"service"}),
        ("key=k%D9%A3", {"key"}),  # an Arabic-Indic digit: no key id has it
        ("group=hour&group=day&colour=red", {"group", "colour"}),
    ],
)
def test_parse_query_names_every_bad_parameter(query, fields):
    if not fields:
        parse_query(QueryDict(query), NOW)
        return
    with pytest.raises(Invalid) as raised:
        parse_query(QueryDict(query), NOW)
    assert set(raised.value.errors) == fields
