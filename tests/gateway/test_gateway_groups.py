"""Service groups on two real gateway processes sharing one Redis, as two replicas would: the
weighted split holds across them, a member with no ready instance takes none, a session
sticks to one member, a blue-green switch in one routing change fails no request, and who
may call the group is decided as for a service (contracts.service_groups,
gateway.routing.groups)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gateway_support import (
    Engine,
    GatewayProcess,
    forget,
    isolated_settings,
    make_key,
    make_token,
    publish,
    service,
    wait_until,
)

from contracts.routing import RoutedKey, RoutedService, Snapshot
from contracts.service_groups import AUTO, CUSTOMIZED, GroupMember, RoutedGroup

pytestmark = pytest.mark.timeout(120)

BLUE_TOKEN, BLUE_DIGEST = make_token()
GREEN_TOKEN, GREEN_DIGEST = make_token()
GROUP_KEY, GROUP_KEY_DIGEST = make_key()  # scoped to the group
BLUE_KEY, BLUE_KEY_DIGEST = make_key()  # scoped to blue alone
KEYS = {
    GROUP_KEY_DIGEST: RoutedKey(id="k-group", services=frozenset({"g"})),
    BLUE_KEY_DIGEST: RoutedKey(id="k-blue", services=frozenset({"blue"})),
}


class Replicas:
    """Two gateway processes on one Redis, and the routing both serve."""

    def __init__(self, redis_url: str, engines: list[Engine]) -> None:
        self.redis_url = redis_url
        self.settings = isolated_settings(redis_url)
        self.engines = engines
        self.processes = [GatewayProcess(self.settings), GatewayProcess(self.settings)]
        self.urls = [p.url for p in self.processes]
        self.version = 0

    def members(self, blue_ready: bool = True, green_ready: bool = True) -> list[RoutedService]:
        a, b = self.engines
        return [
            service("blue", [a.instance] if blue_ready else [], [BLUE_DIGEST], ("blue-model",)),
            service("green", [b.instance] if green_ready else [], [GREEN_DIGEST], ("green-model",)),
        ]

    def route(self, group: RoutedGroup, *services: RoutedService) -> None:
        """Publishes, and waits until both processes serve it."""
        self.version += 1
        routing = Snapshot(version=self.version, services={s.name: s for s in services},
                           keys=KEYS, groups={group.name: group})  # fmt: skip
        publish(self.redis_url, self.settings, routing)

        def serves(url: str) -> bool:
            health = httpx.get(url + "/healthz", trust_env=False).json()
            return bool(health["snapshot_version"] == self.version)

        assert all(wait_until(lambda u=u: serves(u), 5) for u in self.urls)


@pytest.fixture(scope="module")
def replicas(redis_url: str, engines: list[Engine]) -> Iterator[Replicas]:
    started = Replicas(redis_url, engines)
    yield started
    for process in started.processes:
        process.stop()
    forget(redis_url, started.settings)


def weighted(blue: int, green: int, mode: str = CUSTOMIZED, **fields) -> RoutedGroup:
    members = (GroupMember("blue", blue), GroupMember("green", green))
    return RoutedGroup("g", mode, members, ("x-session-id",), **fields)


def call(client: httpx.Client, url: str, token: str = BLUE_TOKEN, **headers: str) -> httpx.Response:
    return client.post(url + "/api/predict/g/echo/x", content=b"{}",
                       headers={"Authorization": f"Bearer {token}", **headers})  # fmt: skip


def split(replicas: Replicas, count: int, **headers: str) -> Counter:
    """`count` calls to the group, alternating between the gateways, eight at a time: which
    engine answered each (every call must succeed)."""

    def one(index: int) -> str:
        with httpx.Client(timeout=10, trust_env=False) as client:
            answer = call(client, replicas.urls[index % 2], **headers)
        assert answer.status_code == 200, answer.text
        return answer.json()["instance"]

    with ThreadPoolExecutor(8) as pool:
        return Counter(pool.map(one, range(count)))


def test_the_weighted_split_holds_across_gateways_within_two_percent(replicas):
    replicas.route(weighted(900, 100), *replicas.members())
    answered = split(replicas, 2000)
    assert answered["engine-a"] + answered["engine-b"] == 2000
    assert abs(answered["engine-a"] - 1800) <= 40  # ±2 % of 2,000
    replicas.route(weighted(1, 1, mode=AUTO), *replicas.members())  # auto: by ready instances
    answered = split(replicas, 100)
    assert abs(answered["engine-a"] - 50) <= 2


def test_a_member_with_no_ready_instance_takes_none_of_the_groups_traffic(replicas):
    replicas.route(weighted(500, 500), *replicas.members(green_ready=False))
    assert split(replicas, 200) == Counter({"engine-a": 200})


def test_a_session_stays_on_one_member_through_either_gateway(replicas):
    replicas.route(weighted(500, 500), *replicas.members())
    where: dict[str, set[str]] = {}
    with httpx.Client(timeout=10, trust_env=False) as client:
        for index in range(240):
            session = f"user-{index % 60}"
            answer = call(client, replicas.urls[index % 2], **{"x-session-id": session})
            where.setdefault(session, set()).add(answer.json()["instance"])
    assert all(len(engines) == 1 for engines in where.values())
    assert {"engine-a", "engine-b"} == set().union(*where.values())  # sessions spread by weight


def test_blue_green_switch_in_one_call_fails_no_request(replicas):
    replicas.route(weighted(1000, 0), *replicas.members())
    statuses: Counter = Counter()
    stop = threading.Event()

    def load(url: str) -> None:
        with httpx.Client(timeout=10, trust_env=False) as client:
            while not stop.is_set():
                answer = call(client, url)
                statuses[answer.status_code, answer.json().get("instance")] += 1

    threads = [threading.Thread(target=load, args=(u,)) for u in replicas.urls * 2]
    for thread in threads:
        thread.start()
    time.sleep(0.5)
    replicas.route(weighted(0, 1000), *replicas.members())
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert {status for status, _ in statuses} == {200}
    assert statuses[200, "engine-a"] > 0 and statuses[200, "engine-b"] > 0
    assert split(replicas, 40) == Counter({"engine-b": 40})  # after the switch: green alone


def test_who_may_call_the_group(replicas):
    replicas.route(weighted(500, 500), *replicas.members())
    url = replicas.urls[0]
    with httpx.Client(timeout=10, trust_env=False) as client:
        for token in (BLUE_TOKEN, GREEN_TOKEN, GROUP_KEY):  # a member's token, a group key
            assert call(client, url, token).status_code == 200
        assert call(client, url, BLUE_KEY).status_code == 403  # scoped to blue alone
        assert call(client, url, "wharf-sk-unknown").status_code == 401
        assert client.post(url + "/api/predict/g/echo/x").status_code == 401
        # the group key reaches the group, not its members' own endpoints
        own = client.post(url + "/api/predict/blue/echo/x", headers={
            "Authorization": f"Bearer {GROUP_KEY}"})  # fmt: skip
        assert own.status_code == 403


def test_openai_form_names_the_group_as_its_model(replicas):
    replicas.route(weighted(1000, 0), *replicas.members())
    url = replicas.urls[1]
    with httpx.Client(timeout=10, trust_env=False) as client:
        headers = {"Authorization": f"Bearer {GROUP_KEY}", "x-test-id": "group-openai"}
        answer = client.post(url + "/v1/completions", headers=headers,
                             json={"model": "g", "prompt": "hi", "max_tokens": 2})  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert answer.json()["choices"][0]["text"].startswith("engine-a")
        assert replicas.engines[0].recorder.seen["group-openai"].body["model"] == "blue-model"
        listed = client.get(url + "/v1/models", headers={"Authorization": f"Bearer {GROUP_KEY}"})
        assert [m["id"] for m in listed.json()["data"]] == ["g"]
        refused = client.post(url + "/v1/completions", json={"model": "g", "prompt": "hi"},
                              headers={"Authorization": f"Bearer {BLUE_KEY}"})  # fmt: skip
        assert refused.status_code == 404 and refused.json()["error"]["code"] == "model_not_found"


def test_a_group_with_no_member_released_answers_503(replicas):
    replicas.route(RoutedGroup("g", CUSTOMIZED, (), ("x-session-id",)), *replicas.members())
    with httpx.Client(timeout=10, trust_env=False) as client:
        answer = call(client, replicas.urls[0], GROUP_KEY)
    assert answer.status_code == 503 and answer.json()["error"]["code"] == "no_group_member"


def test_prefix_cache_routing_works_inside_the_member(replicas):
    """A member's own routing applies to the calls the group sends it: with prefix_cache, a
    shared prompt reaches one of its instances (its prefix cache warm); with the default
    routing the same calls spread over both."""
    a, b = replicas.engines
    prompt = "You are the support assistant of Wharf; answer briefly and politely. " * 8

    def engines_reached(routing: str) -> set[str]:
        blue = service("blue", [a.instance, b.instance], [BLUE_DIGEST], ("blue-model",),
                       routing=routing)  # fmt: skip
        replicas.route(weighted(1000, 0), blue, replicas.members()[1])
        with httpx.Client(timeout=10, trust_env=False) as client:
            texts = [
                client.post(replicas.urls[0] + "/v1/completions",
                            headers={"Authorization": f"Bearer {GROUP_KEY}"},
                            json={"model": "g", "prompt": f"{prompt}{routing} {index}",
                                  "max_tokens": 1}).json()["choices"][0]["text"]
                for index in range(12)
            ]  # fmt: skip
        return {text.split("-")[1] for text in texts}  # "engine-a-0 " -> "a"

    assert len(engines_reached("prefix_cache")) == 1
    assert engines_reached("least_outstanding") == {"a", "b"}
