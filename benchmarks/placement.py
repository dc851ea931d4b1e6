"""Fleet placement speed: 1,000 instances on 100 nodes, against a naive baseline in the same run.

Run from the repository root (pure Python, no accelerator, a few seconds):

    .venv/bin/python benchmarks/placement.py [--needs 1000] [--nodes 100] [--rounds 5] [--seed 7]

The fleet is simulated: 8 cards per node (GPUs on most, NPUs on some), a few nodes cordoned
or not ready, resource-group labels on a fifth of them, models cached here and there, and
some instances already held. The needs are 1, 2, 4 and 8-card instances of ~50 services, more
than the fleet holds, so the last ones are refused and their per-node reasons are built too
(and one service, svc-10, asks for NPUs in a resource group that has none: never placed).

The baseline decides the same way but recomputes every node's free cards, CPUs, memory and
service counts from all held and placed instances for every need, which is what a scheduler
written without incremental state does. Both must give the same answer; the run checks that.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workers.nodes.devices import first_contiguous  # noqa: E402
from workers.scheduling.placement import (  # noqa: E402
    Card,
    Held,
    Need,
    NodeOffer,
    Placed,
    Unplaced,
    node_states,
    place,
    place_on,
    shortfall,
)

TARGET_S = 1.0
CARDS_PER_NODE = 8
SERVICES = 50
CARD_MIX = ((1, 0.55), (2, 0.25), (4, 0.12), (8, 0.08))  # cards per instance, share


def fleet(nodes: int, rng: random.Random) -> list[NodeOffer]:
    offers = []
    for i in range(nodes):
        kind = "npu" if i % 5 == 4 else "gpu"
        state = "cordoned" if i % 33 == 1 else "not_ready" if i % 47 == 2 else ""
        labels = {"resource": "group-a" if i % 2 else "group-b"} if i % 5 == 0 else {}
        models = frozenset(f"model-{m}" for m in rng.sample(range(SERVICES), 3))
        cards = tuple(Card(kind, c, 65536) for c in range(CARDS_PER_NODE))
        offers.append(NodeOffer(f"node-{i:03d}", cards, 192, 1_048_576, labels, state, models))
    return offers


def held_on(offers: list[NodeOffer], rng: random.Random) -> list[Held]:
    """One or two instances on a third of the nodes, 1 or 2 cards each."""
    held = []
    for offer in rng.sample(offers, len(offers) // 3):
        kind, start = offer.cards[0].kind, 0
        for _ in range(rng.randint(1, 2)):
            width = rng.choice((1, 2))
            cards = tuple(range(start, start + width))
            held.append(Held(offer.name, f"svc-{rng.randrange(SERVICES)}", kind, cards, 8, 65536))
            start += width
    return held


def needs_for(count: int, rng: random.Random) -> list[Need]:
    widths, shares = zip(*CARD_MIX, strict=True)
    needs = []
    for i in range(count):
        s = rng.randrange(SERVICES)
        cards = rng.choices(widths, shares)[0]
        selector = {"resource": "group-a"} if s % 10 == 0 else {}
        kind = "npu" if s % 7 == 3 else "gpu"
        cpu, memory = 4 * cards, 32768 * cards
        needs.append(
            Need(f"inst-{i:04d}", f"svc-{s}", kind, cards, cpu, memory, selector, f"model-{s}")
        )
    return needs


# --- the baseline: the same rules, nothing kept between needs ----------------------------------


def _naive_free(offer: NodeOffer, entries: list[tuple[str, Held]]):
    """Free cards per kind, CPUs, memory and instances per service, from every entry."""
    used: set[tuple[str, int]] = set()
    cpu, memory, services = float(offer.cpus), offer.memory_mb, {}
    for node, h in entries:
        if node != offer.name:
            continue
        used.update((h.kind, i) for i in h.cards)
        cpu, memory = cpu - h.cpu, memory - h.memory_mb
        services[h.service] = services.get(h.service, 0) + 1
    free: dict[str, list[int]] = {}
    for card in sorted(offer.cards, key=lambda c: c.index):
        if (card.kind, card.index) not in used:
            free.setdefault(card.kind, []).append(card.index)
    return free, cpu, memory, services


def _naive_reason(offer, need, free, cpu, memory) -> str:
    total = sum(1 for c in offer.cards if c.kind == need.kind)
    return shortfall(offer, need, len(free.get(need.kind, ())), total, cpu, memory)


def naive_place(needs, nodes, held) -> list[Placed | Unplaced]:
    entries = [(h.node, h) for h in held]
    offers = sorted(nodes, key=lambda o: o.name)
    results: list[Placed | Unplaced] = []
    for need in needs:
        best, best_rank, reasons = None, None, {}
        for offer in offers:
            free, cpu, memory, services = _naive_free(offer, entries)
            reason = _naive_reason(offer, need, free, cpu, memory)
            reasons[offer.name] = reason
            if reason:
                continue
            kind_free = free.get(need.kind, [])
            left = len(kind_free) if need.kind else sum(map(len, free.values()))
            rank = (
                services.get(need.service, 0),
                bool(need.model) and need.model not in offer.models,
                bool(need.image) and need.image not in offer.images,
                left - need.cards,
            )
            if best_rank is None or rank < best_rank:
                best, best_rank, best_free = offer, rank, kind_free
        if best is None:
            results.append(Unplaced(need.key, reasons))
            continue
        cards = ()
        if need.cards:
            cards = first_contiguous(best_free, need.cards) or tuple(best_free[: need.cards])
        took = Held(best.name, need.service, need.kind, cards, need.cpu, need.memory_mb)
        entries.append((best.name, took))
        results.append(Placed(need.key, best.name, cards))
    return results


# --- the run -----------------------------------------------------------------------------------


def timed(fn, rounds: int, *args) -> tuple[list[float], list]:
    times, result = [], None
    for _ in range(rounds):
        start = time.perf_counter()
        result = fn(*args)
        times.append(time.perf_counter() - start)
    return times, result


def report(needs, nodes, held, result, ours: list[float], base: list[float]) -> None:
    placed = [r for r in result if isinstance(r, Placed)]
    free = len(nodes) * CARDS_PER_NODE - sum(len(h.cards) for h in held)
    services = len({n.service for n in needs})
    print(
        f"{len(needs)} needs ({services} services) on {len(nodes)} nodes x {CARDS_PER_NODE} cards"
    )
    print(f"{len(held)} instances held ({free} cards free before); same answer as the baseline")
    width = {n.key: n.cards for n in needs}
    for cards, _ in CARD_MIX:
        asked = sum(1 for n in needs if n.cards == cards)
        got = sum(1 for p in placed if width[p.key] == cards)
        print(f"  {cards}-card needs: {asked:>4}, placed {got:>4}")
    used, unplaced = sum(len(p.cards) for p in placed), len(needs) - len(placed)
    print(f"  all: {len(needs)}, placed {len(placed)} ({used} cards), unplaced {unplaced}")
    rounds = len(ours)
    print(f"\n{'':<18}{'best of ' + str(rounds):>12}{'median':>12}")
    for name, times in (("place()", ours), ("baseline (naive)", base)):
        print(f"{name:<18}{min(times) * 1e3:>9.1f} ms{statistics.median(times) * 1e3:>9.1f} ms")
    best, median = min(base) / min(ours), statistics.median(base) / statistics.median(ours)
    print(f"{'speedup':<18}{best:>11.1f}x{median:>11.1f}x")


def full_fleet_pass(nodes: int, replicas: int, rounds: int, rng: random.Random) -> None:
    """What a scheduler pass costs when nothing fits: `replicas` one-card needs of one service
    on `nodes` nodes whose cards are all held. Every need explained (what `place` returns)
    against stopping at the first (what the scheduler asks for: it writes only that reason),
    and that reason's message with nodes of one reason grouped against one entry per node."""
    offers = fleet(nodes, rng)
    held = [Held(o.name, "other", o.cards[0].kind, tuple(range(CARDS_PER_NODE))) for o in offers]
    needs = [Need(f"svc-x-{i}", "svc-x", "gpu", 1) for i in range(replicas)]
    every, _ = timed(lambda: place_on(needs, node_states(offers, held)), rounds)
    first, result = timed(
        lambda: place_on(needs, node_states(offers, held), until_unplaced=True), rounds
    )
    (unplaced,) = result
    flat = "; ".join(f"{node}: {why}" for node, why in unplaced.reasons.items())
    print(
        f"\na pass of {replicas} replicas on {nodes} full nodes (nothing fits), median of {rounds}"
    )
    print(f"  every need explained     {statistics.median(every) * 1e3:>8.1f} ms")
    print(f"  until the first unplaced {statistics.median(first) * 1e3:>8.1f} ms")
    print(
        f"  its message: {len(flat):,} characters a node each, {len(unplaced.message()):,} grouped"
    )
    print(f"    {unplaced.message()[:300]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--needs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--full-nodes", type=int, default=500, help="the full fleet's nodes")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    nodes = fleet(args.nodes, rng)
    held = held_on(nodes, rng)
    needs = needs_for(args.needs, rng)

    ours, result = timed(place, args.rounds, needs, nodes, held)
    base, expected = timed(naive_place, args.rounds, needs, nodes, held)
    if result != expected:
        print("MISMATCH: place() and the baseline disagree", file=sys.stderr)
        return 1

    report(needs, nodes, held, result, ours, base)
    full_fleet_pass(args.full_nodes, 10, args.rounds, random.Random(args.seed))
    verdict = "PASS" if statistics.median(ours) < TARGET_S else "FAIL"
    print(f"\ntarget: place() median < {TARGET_S:g} s: {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
