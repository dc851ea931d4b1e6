"""The access-key views in Wharf's own OpenAPI schema (controlplane/openapi.py calls
describe_access_key_views). The /api/v2/ calls are not in it: they are EAS's OpenAPI
(2021-07-01), which Alibaba's own documents and SDKs describe."""

from __future__ import annotations

from collections.abc import Callable

from rest_framework import serializers

from controlplane.eas_api import keys


class AccessKeyCreated(keys.AccessKeySerializer):
    secret = serializers.CharField(help_text="the AccessKeySecret; shown once")

    class Meta(keys.AccessKeySerializer.Meta):
        fields = [*keys.AccessKeySerializer.Meta.fields, "secret"]


def describe_access_key_views(V: Callable, _op: Callable, errors: dict) -> None:  # noqa: N803
    V(get=_op("access_keys_list", "Your access key pairs in this workspace (EAS's SDKs)",
              responses={200: keys.AccessKeySerializer(many=True)}),
      post=_op("access_keys_create", "Make an access key pair; its secret is shown once",
               request={"application/json": {"type": "object", "additionalProperties": False,
                                             "properties": {"name": {"type": "string"}}}},
               responses={201: AccessKeyCreated}),
      )(keys.AccessKeyList)  # fmt: skip
    V(delete=_op("access_keys_revoke", "Revoke an access key pair",
                 responses={204: None, 404: errors}))(keys.AccessKeyDetail)  # fmt: skip
