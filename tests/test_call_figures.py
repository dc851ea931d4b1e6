"""Call figures (contracts.call_figures) and the mirror's share
(gateway.routing.mirror.Mirrors.due): pure, table-driven."""

from __future__ import annotations

import pytest

from contracts.call_figures import Figures, bucket, is_error, percentile, slots_between
from contracts.routing import RoutedService
from gateway.routing.mirror import Mirrors


@pytest.mark.parametrize(
    ("ms", "index"),
    [(0, 0), (1, 0), (1.1, 1), (99, 17), (100, 17), (101, 18), (600000, 44), (10**9, 44)],
)
def test_a_latency_falls_in_the_bucket_whose_bound_it_does_not_pass(ms, index):
    assert bucket(ms) == index


@pytest.mark.parametrize(
    ("status", "broken", "error"),
    [(200, False, False), (500, False, True), (503, False, True), (429, False, False),
     (200, True, True), (404, False, False)],
)  # fmt: skip
def test_what_counts_as_an_error(status, broken, error):
    assert is_error(status, broken) == error


def test_percentiles_read_from_the_buckets():
    figures = Figures()
    for ms in [8] * 50 + [90] * 45 + [2500] * 5:
        figures.add(200, False, ms, ms / 10)
    assert (percentile(figures.ttft, 0.5), percentile(figures.ttft, 0.95)) == (8, 100)
    assert percentile(figures.ttft, 0.99) == 2500
    assert percentile(Figures().ttft, 0.5) is None
    summary = figures.summary()
    assert summary["requests"] == 100 and summary["error_rate"] == 0.0
    assert summary["itl_p50_ms"] == 1 and Figures().summary()["error_rate"] is None


def test_figures_add_up_across_gateways_through_their_hash_fields():
    one, two = Figures(), Figures()
    one.add(200, False, 40, None)
    two.add(502, False, None, None)
    two.add(200, True, 900, 30)
    read = Figures.from_hashes([one.fields(), {k.encode(): str(v).encode()
                                               for k, v in two.fields().items()},
                                {"junk": "1", "ttft:99": "3", "errors": "x"}])  # fmt: skip
    assert (read.requests, read.errors) == (3, 2)
    assert sum(read.ttft) == 2 and sum(read.itl) == 1
    one.merge(two)
    assert one == read


def test_the_slots_of_an_interval():
    assert list(slots_between(100.0, 131.0)) == [10, 11, 12, 13]


@pytest.mark.parametrize(("ratio", "copied"), [(100, 40), (50, 20), (25, 10), (10, 4), (33, 13),
                                               (1, 0), (0, 0)])  # fmt: skip
def test_exactly_the_ratio_of_calls_is_copied(ratio, copied):
    mirrors = Mirrors()
    source = RoutedService("main", mirror_targets=("shadow",), mirror_ratio=ratio)
    assert sum(mirrors.due(source) for _ in range(40)) == copied
    assert not Mirrors().due(RoutedService("alone", mirror_ratio=100))  # no target: none
