"""The pure parts of web applications (contracts.webapp, gateway.webapp.pages.pick_instance): where
an app's redirects and cookies go under its prefix, what a ticket or pass is valid for, which
instance a browser stays on, and the spec hash left as it was."""

from __future__ import annotations

import pytest

from contracts import webapp
from contracts.routing import RoutedInstance
from contracts.spec import parse_spec
from gateway.webapp.pages import pick_instance

SECRET = b"a token key"
NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("/login?next=/", "/web/sd/login?next=/"),
        ("/", "/web/sd/"),
        ("queue/join", "queue/join"),  # relative: the browser resolves it under the prefix
        ("//elsewhere.example/x", "//elsewhere.example/x"),
        ("https://elsewhere.example/", "https://elsewhere.example/"),
    ],
)
def test_an_apps_redirect_stays_under_its_prefix(location: str, expected: str) -> None:
    assert webapp.app_location(location, "sd") == expected


@pytest.mark.parametrize(
    ("set_cookie", "expected"),
    [
        ("s=1; Path=/; HttpOnly", "s=1; HttpOnly; Path=/web/sd/"),
        ("s=1", "s=1; Path=/web/sd/"),
        ("s=1; path=/api; Max-Age=5", "s=1; Max-Age=5; Path=/web/sd/api"),
        ("s=1; Domain=evil.example; Path=/", "s=1; Path=/web/sd/"),
        ("s=1; Path=relative", "s=1; Path=/web/sd/"),
    ],
)
def test_an_apps_cookie_reaches_that_app_alone(set_cookie: str, expected: str) -> None:
    assert webapp.app_cookie_path(set_cookie, "sd") == expected


def test_a_pass_keeps_the_tickets_session_and_lasts_hours() -> None:
    ticket = webapp.verify(SECRET, webapp.TICKET, webapp.sign(SECRET, webapp.TICKET, "sd", NOW),
                           "sd", NOW + webapp.TICKET_SECONDS - 1)  # fmt: skip
    assert ticket is not None
    text = webapp.sign(SECRET, webapp.PASS, "sd", NOW, ticket.session)
    found = webapp.verify(SECRET, webapp.PASS, text, "sd", NOW + webapp.PASS_SECONDS - 1)
    assert found == webapp.WebPass("sd", int(NOW) + webapp.PASS_SECONDS, ticket.session)
    assert webapp.verify(SECRET, webapp.PASS, text, "sd", NOW + webapp.PASS_SECONDS) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda t: t.replace(".sd.", ".sd2."),  # another service's name put in
        lambda t: t.replace(f".{int(NOW) + 60}.", f".{int(NOW) + 6000}."),  # expiry stretched
        lambda t: t + "x",
        lambda t: "",
        lambda t: "v1.sd.-1.s.sig",
        lambda t: "v2" + t[2:],
    ],
    ids=["service", "expiry", "signature", "empty", "negative", "version"],
)
def test_a_changed_ticket_is_not_valid(change) -> None:
    text = webapp.sign(SECRET, webapp.TICKET, "sd", NOW)
    assert webapp.verify(SECRET, webapp.TICKET, text, "sd", NOW) is not None
    assert webapp.verify(SECRET, webapp.TICKET, change(text), "sd", NOW) is None


def test_the_pass_cookie_is_httponly_strict_and_secure_over_tls() -> None:
    assert webapp.cookie_header("v", "sd", secure=False) == (
        f"wharf-web=v; Path=/web/sd/; Max-Age={webapp.PASS_SECONDS}; HttpOnly; SameSite=Strict"
    )
    assert webapp.cookie_header("v", "sd", secure=True).endswith("; Secure")


def test_a_browser_session_stays_on_its_instance_until_that_one_leaves() -> None:
    instances = [RoutedInstance(name=f"i{n}", url=f"http://10.0.0.{n}:1") for n in range(4)]
    chosen = {s: pick_instance(instances, s) for s in (f"session-{n}" for n in range(40))}
    assert len(set(chosen.values())) == 4  # sessions spread over the instances
    for session, instance in chosen.items():
        others = [i for i in instances if i != instance]
        assert pick_instance(instances[::-1], session) == instance
        kept = [i for i in instances if i.name != "i0" or instance.name == "i0"]
        assert pick_instance(kept, session) == instance  # another's leaving moves it not
        assert pick_instance(others, session) in others


def test_enable_webservice_shapes_no_instance() -> None:
    spec = {"name": "sd", "containers": [{"image": "sd:1", "command": "run", "port": 8000}]}
    web = {**spec, "metadata": {"enable_webservice": True}}
    assert parse_spec(web).spec_hash() == parse_spec(spec).spec_hash() == "f1e33e2af8ee"
    assert (
        parse_spec(web).metadata.enable_webservice
        and not parse_spec(spec).metadata.enable_webservice
    )
