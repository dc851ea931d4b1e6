"""EAS's own management SDK (alibabacloud-eas20210701, from PyPI) pointed at a live Wharf,
signing with a Wharf-issued access key pair."""

from __future__ import annotations

from urllib.parse import urlsplit

from alibabacloud_eas20210701.client import Client
from alibabacloud_tea_openapi import models as openapi
from alibabacloud_tea_openapi.exceptions import ClientException
from django.contrib.auth import get_user_model

from controlplane.eas_api.models import AccessKey
from tests.api_support import member

REGION = "cn-hangzhou"  # any ClusterId: Wharf is the one cluster


def sdk(url: str, key_id: str, secret: str) -> Client:
    """The SDK as an EAS user configures it, but for the endpoint: Wharf's address, http."""
    config = openapi.Config(access_key_id=key_id, access_key_secret=secret, region_id=REGION,
                            endpoint=urlsplit(url).netloc, protocol="http")  # fmt: skip
    return Client(config)


def key_pair(username: str, role: str = "developer", workspace: str = "default"):
    """A new user with `role` in `workspace` and an access key pair of theirs."""
    user = get_user_model().objects.create_user(username)
    key, secret = AccessKey.issue(user, member(user, role, workspace))
    return key, secret


def refusal(call) -> ClientException:
    """The SDK's exception for a call Wharf refuses (a failure if it succeeds)."""
    try:
        call()
    except ClientException as exc:
        return exc
    raise AssertionError("the call succeeded")
