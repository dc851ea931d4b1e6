"""Routing policies: which instance of a service a request goes to, as pure functions.

Every policy gets the candidates already rotated (the balancer's per-service turn, so equal
instances share the load), the load it knows (`Load`: this gateway's requests in flight per
instance, the engines' own figures as the nodes scrape them, the instances cooling down after
a failure) and, for the cache-aware ones, the request's key, and returns the candidates best
first. Whatever the policy, an instance cooling down goes after every healthy one, and the
order after the first is the order failovers follow.

- ``least_outstanding`` (the default): fewest requests in flight, ties in turn.
- ``round_robin``: the turn alone (prefill/decode legs may ask for it).
- ``prefix_cache``: requests sharing a prompt prefix go to the instance that first served it,
  so its engine's prefix cache answers the shared part (vLLM's automatic prefix caching,
  SGLang's radix cache). The prompt is cut into ``BLOCK_CHARS``-character blocks whose
  hashes are chained (a block's hash covers everything before it, as the engines' own block
  hashes do), and the balancer remembers, in a bounded LRU table (``PrefixTable``), which
  instance owns each block hash, as llm-d's approximate prefix-cache scorer and AIBrix's
  prefix-cache router do. Of the instances holding part of the prompt, the one holding the
  longest prefix is taken if its load is within the bound below; else least outstanding.
  A prefix nobody holds goes to the instance owning the fewest blocks (within the bound), so
  prefixes spread evenly over the engines' caches. The instance chosen becomes the owner of
  the blocks no other live instance owns (an owner keeps its blocks while a request that
  found it past the bound goes elsewhere).
- ``kv_cache_load``: by the engines' own view of their load: requests waiting in the
  engine's queue and KV-cache usage, plus this gateway's requests in flight (fresh, where the
  scraped figures are up to a few seconds old; see ``kv_score``). An instance without
  figures (a new one, or its scrape missing) counts by its requests in flight alone.
- With a LoRA adapter called, whatever the policy: an instance whose engine has the adapter in
  one of its slots (its requests use it now, by the engine's own metrics) is preferred within
  the load bound (``resident``), as AIBrix's LoRA-aware routing does.
- ``session``: requests with the same session id (a header, ``x-session-id`` by default) go
  to the same instance, chosen by rendezvous (highest random weight) hashing over the
  instances' names: adding or losing an instance moves only the sessions it gains or held.
  Within the load bound; no session id: least outstanding.

The load bound. A preferred instance (prefix or session) is taken while its requests in
flight are at most the least loaded healthy candidate's plus ``max(LOAD_SLACK,
LOAD_SLACK_FRACTION x that least load)``: four requests at low load, half as many again at
high load. An engine batches continuously, so a few requests more on one instance cost its
batch little, while a prefix hit saves the prefill of the whole shared prefix, the larger
share of a long prompt's latency; but a popular prefix (one system prompt for everyone) must
not pile every request onto one instance: past the bound, load wins. SGLang's cache-aware
router makes the same trade with a looser bound (32 requests and a relative factor), tuned
for GPUs running hundreds of sequences; the relative part here keeps the bound in step with
the batch size, the absolute part keeps it useful when an engine runs few. A tighter bound
(two, a quarter) was measured to lose the point: with 8 requests in flight over two engines
and their prefixes split evenly, one engine is 3 past the other about a third of the time,
and each request sent away then is a miss on the other engine that also evicts its own
prefixes (benchmarks/prefix_routing.py: a 56-67% hit rate, against 51-59% for
least_outstanding).
"""

from __future__ import annotations

import hashlib
from collections import Counter, OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from contracts.routing import RoutedInstance

LEAST_OUTSTANDING = "least_outstanding"
ROUND_ROBIN = "round_robin"
PREFIX_CACHE = "prefix_cache"
KV_CACHE_LOAD = "kv_cache_load"
SESSION = "session"

# Characters per prefix block: about 16 tokens of English, vLLM's KV block size (and llm-d's
# default); a prompt's first MAX_BLOCKS blocks (16 KiB of text) are looked up.
BLOCK_CHARS = 64
MAX_BLOCKS = 256
# Block hashes remembered per gateway process: 64 Ki blocks of 64 characters are 4 MiB of
# distinct prompt text, about the prefix caches of ten engines holding 100k tokens each
# (llm-d keeps 31,250 per server); a few MiB of memory.
PREFIX_TABLE_BLOCKS = 65_536
# The load bound (see the module's docstring).
LOAD_SLACK = 4
LOAD_SLACK_FRACTION = 0.5
# A full KV cache weighs as much as this many requests in flight (kv_score).
KV_WEIGHT = 2.0


@dataclass(frozen=True)
class EngineFigures:
    """An engine's own figures, from its latest scraped sample (contracts.engine_load)."""

    waiting: float = 0.0  # requests waiting in the engine's queue
    running: float = 0.0  # requests the engine runs
    kv_cache: float = 0.0  # KV-cache usage, 0..1
    adapters: frozenset[str] = frozenset()  # LoRA adapters its requests use now (its slots)


@dataclass(frozen=True)
class Load:
    """What a policy knows of the candidates' load, by instance url."""

    in_flight: Mapping[str, int] = field(default_factory=dict)  # this gateway's requests
    figures: Mapping[str, EngineFigures] = field(default_factory=dict)  # absent: unknown
    cooling: Collection[str] = frozenset()  # failed recently: tried last

    def requests(self, url: str) -> int:
        return self.in_flight.get(url, 0)


@dataclass
class RoutingKey:
    """What a request offers the cache-aware policies: its prompt's text (prefix_cache) and
    its session id (session). The prompt's block hashes are computed once per seed."""

    prompt: str | None = None
    session: str | None = None
    adapter: str = ""  # the LoRA adapter called: an engine that has it in a slot is preferred
    _blocks: dict[str, tuple[int, ...]] = field(default_factory=dict, repr=False)

    def blocks(self, seed: str) -> tuple[int, ...]:
        found = self._blocks.get(seed)
        if found is None:
            found = self._blocks[seed] = prompt_blocks(self.prompt or "", seed)
        return found


def prompt_blocks(text: str, seed: str) -> tuple[int, ...]:
    """Chained hashes of the text's whole BLOCK_CHARS blocks (at most MAX_BLOCKS), seeded
    (with the service, or its prefill pool) so that equal prompts of two services never share
    an entry. A trailing partial block is left out, as engines cache whole blocks only.

    Python's own hash: per process, as the table is, and fast enough to run per request.
    """
    chained = hash(seed)
    blocks: list[int] = []
    whole = min(len(text) // BLOCK_CHARS, MAX_BLOCKS)
    for start in range(0, whole * BLOCK_CHARS, BLOCK_CHARS):
        chained = hash((chained, text[start : start + BLOCK_CHARS]))
        blocks.append(chained)
    return tuple(blocks)


class PrefixTable:
    """Which instance (url) owns each prompt block hash (see `record`): a bounded LRU."""

    def __init__(self, capacity: int = PREFIX_TABLE_BLOCKS) -> None:
        self.capacity = capacity
        self._owners: OrderedDict[int, str] = OrderedDict()
        self._held: Counter[str] = Counter()  # blocks each url owns

    def held(self) -> Mapping[str, int]:
        """Blocks owned per url: how much of the engines' caches the table has filled."""
        return self._held

    def __len__(self) -> int:
        return len(self._owners)

    def matched(self, blocks: Sequence[int]) -> dict[str, int]:
        """Per url, how many of the prompt's leading blocks it holds: the deepest block it
        owns (a chained hash stands for every block before it). Stops at the first block no
        instance owns: nothing deeper can match."""
        depth: dict[str, int] = {}
        owners = self._owners
        for index, block in enumerate(blocks):
            url = owners.get(block)
            if url is None:
                break
            depth[url] = index + 1
        return depth

    def record(self, blocks: Sequence[int], url: str, live: Collection[str] | None = None) -> None:
        """The request of these blocks went to `url`: it owns those no instance of `live` (the
        pool's urls; None: any) owns. A block another live instance owns stays its: a request
        sent elsewhere because the owner was past the load bound must not move the prefix,
        which the owner's engine still caches, and which the next requests should find there
        (moving it would make both engines' caches churn). The deepest go in first, so the
        first blocks, shared by the most prompts, are the last evicted (and `matched`, which
        stops at the first unowned block, never loses a prompt's head)."""
        owners, held = self._owners, self._held
        for block in reversed(blocks):
            owner = owners.get(block)
            if owner is None or live is None or owner not in live:
                if owner is not None:
                    held[owner] -= 1
                owners[block] = url
                held[url] += 1
            owners.move_to_end(block)
        while len(owners) > self.capacity:
            _, gone = owners.popitem(last=False)
            held[gone] -= 1
            if held[gone] <= 0:
                del held[gone]


def rank(
    policy: str,
    candidates: Sequence[RoutedInstance],
    load: Load,
    key: RoutingKey | None = None,
    matched: Mapping[str, int] | None = None,
    held: Mapping[str, int] | None = None,
) -> list[RoutedInstance]:
    """The candidates best first under `policy`; prefix_cache's `matched`: the prompt's blocks
    each url holds (PrefixTable.matched; None: the request has no prompt blocks), `held`:
    every block each url owns (PrefixTable.held). An unknown policy ranks as
    least_outstanding."""
    if policy == ROUND_ROBIN:
        ranked = sorted(candidates, key=lambda i: i.url in load.cooling)
    elif policy == KV_CACHE_LOAD:
        ranked = kv_cache_load(candidates, load)
    else:
        ranked = least_outstanding(candidates, load)
        if policy == PREFIX_CACHE and matched is not None:
            ranked = prefix_cache(ranked, load, matched, held or {})
        elif policy == SESSION and key is not None and key.session:
            ranked = session(ranked, load, key.session)
    if key is not None and key.adapter:
        return resident(ranked, load, key.adapter)
    return ranked


def resident(ranked: list[RoutedInstance], load: Load, adapter: str) -> list[RoutedInstance]:
    """`ranked` with, unless its first already has it, the best ranked healthy instance whose
    engine has `adapter` in a slot (its requests use it: vLLM's lora_requests_info) first,
    within the load bound: an engine serving more adapters than it has slots (max_loras) swaps
    one out to take another, and a request waits for that."""
    healthy = [i for i in ranked if i.url not in load.cooling]
    if not healthy or adapter in _adapters(load, ranked[0].url):
        return ranked
    least = min(load.requests(i.url) for i in healthy)
    for instance in healthy:
        has = adapter in _adapters(load, instance.url)
        if has and within_bound(load.requests(instance.url), least):
            return _first(ranked, instance)
    return ranked


def _adapters(load: Load, url: str) -> frozenset[str]:
    figures = load.figures.get(url)
    return figures.adapters if figures is not None else frozenset()


def least_outstanding(candidates: Sequence[RoutedInstance], load: Load) -> list[RoutedInstance]:
    """Healthy before cooling, then fewest in flight; the sort is stable, so ties keep the
    rotated order."""
    cooling, in_flight = load.cooling, load.in_flight
    return sorted(candidates, key=lambda i: (i.url in cooling, in_flight.get(i.url, 0)))


def within_bound(requests: int, least: int) -> bool:
    """Whether an instance with `requests` in flight may be preferred over the least loaded
    healthy one, with `least`: the load bound."""
    return requests <= least + max(LOAD_SLACK, int(least * LOAD_SLACK_FRACTION))


def prefix_cache(
    ranked: list[RoutedInstance],
    load: Load,
    matched: Mapping[str, int],
    held: Mapping[str, int] | None = None,
) -> list[RoutedInstance]:
    """`ranked` (least outstanding) with the instance holding the longest prefix first, if
    one within the load bound holds any; ties go to the less loaded. A prefix nobody holds
    goes, within the bound, to the instance owning the fewest blocks (`held`), so the
    prefixes spread evenly over the engines' caches rather than by whichever was least busy
    the moment each first came."""
    least = load.requests(ranked[0].url)
    if not matched:
        roomy = [i for i in ranked if i.url not in load.cooling
                 and within_bound(load.requests(i.url), least)]  # fmt: skip
        emptiest = min(roomy, key=lambda i: (held or {}).get(i.url, 0), default=None)
        return _first(ranked, emptiest)
    best: RoutedInstance | None = None
    for instance in ranked:
        depth = matched.get(instance.url, 0)
        if depth <= 0 or instance.url in load.cooling:
            continue
        if not within_bound(load.requests(instance.url), least):
            continue
        if best is None or depth > matched[best.url]:
            best = instance
    return _first(ranked, best)


def session(ranked: list[RoutedInstance], load: Load, session_id: str) -> list[RoutedInstance]:
    """`ranked` (least outstanding) with the session's instance first when within the load
    bound: the healthy candidate of the highest rendezvous weight for `session_id`."""
    healthy = [i for i in ranked if i.url not in load.cooling]
    if not healthy:
        return ranked
    chosen = max(healthy, key=lambda i: rendezvous_weight(session_id, i.name))
    if not within_bound(load.requests(chosen.url), load.requests(ranked[0].url)):
        return ranked
    return _first(ranked, chosen)


def rendezvous_weight(session_id: str, instance: str) -> int:
    """A stable pseudo-random weight of (session, instance): the same in every gateway process
    (unlike hash()), so that all gateways send a session to the same instance."""
    digest = hashlib.blake2b(f"{session_id}\0{instance}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def kv_score(url: str, load: Load) -> float:
    """Lower is better: requests in flight from here, plus the engine's waiting queue, plus
    KV_WEIGHT x its KV-cache usage.

    The waiting queue counts every gateway's requests (and counts this gateway's twice, a
    penalty for an engine already saturated: vLLM queues only when its batch or KV cache is
    full); KV usage breaks ties between equal counts towards the engine with room, before it
    has to preempt. The in-flight count is what keeps a burst from all going to the engine
    that looked emptiest in a sample up to a few seconds old.
    """
    score = float(load.requests(url))
    figures = load.figures.get(url)
    if figures is not None:
        score += figures.waiting + KV_WEIGHT * figures.kv_cache
    return score


def kv_cache_load(candidates: Sequence[RoutedInstance], load: Load) -> list[RoutedInstance]:
    """Healthy before cooling, then the lowest kv_score; stable, so ties keep the rotation."""
    return sorted(candidates, key=lambda i: (i.url in load.cooling, kv_score(i.url, load)))


def _first(ranked: list[RoutedInstance], chosen: RoutedInstance | None) -> list[RoutedInstance]:
    if chosen is None or ranked[0] is chosen:
        return ranked
    return [chosen, *(i for i in ranked if i is not chosen)]
