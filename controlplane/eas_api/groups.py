"""EAS's service group calls (OpenAPI 2021-07-01): ListGroups (GET /groups), DescribeGroup,
UpdateGroup and DeleteGroup (GET, PUT, DELETE /groups/{ClusterId}/{GroupName}),
DescribeGroupEndpoints (…/endpoints) and ReleaseService
(PUT /services/{ClusterId}/{ServiceName}/release).

Answered by the v1 API's group logic (controlplane.services.api.groups): the same checks,
events and routing snapshot; only the request and the answer are in EAS's shape, and a
refusal names EAS's field. A group is made and removed by its members' specs
(metadata.group), so DeleteGroup is refused, saying how to remove one."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.eas_api import answers, queries
from controlplane.eas_api.errors import EasError
from controlplane.eas_api.views import EasView, answer, found
from controlplane.services.api.groups import (
    GroupChange,
    Release,
    change_group,
    group_json,
    release,
    valid,
    visible_groups,
)
from controlplane.services.models import ServiceGroup

# EAS's body fields and the v1 API's names for them, per call.
RELEASE_FIELDS = {"Weight": "weight", "TrafficState": "traffic_state"}
UPDATE_FIELDS = {"TrafficMode": "traffic_mode"}


def checked(body, fields: dict[str, str], serializer: type[serializers.Serializer]) -> dict:
    """EAS's body as the v1 serializer's data, checked by it: a field Wharf does not take, an
    empty body or a bad value is a 400 naming EAS's field."""
    if not isinstance(body, dict):
        raise EasError("InvalidParameter", f"the body must be a JSON object of {', '.join(fields)}")
    if unknown := sorted(set(body) - set(fields)):
        raise EasError(
            "InvalidParameter",
            f"{', '.join(unknown)}: not a field Wharf takes here (it takes {', '.join(fields)})",
        )
    if not body:
        raise EasError("InvalidParameter", f"give {' or '.join(fields)}")
    eas_name = {v1: eas for eas, v1 in fields.items()}
    try:
        return valid({fields[name]: value for name, value in body.items()}, serializer)
    except ValidationError as exc:
        detail = exc.detail if isinstance(exc.detail, dict) else {"detail": exc.detail}
        raise ValidationError({eas_name.get(k, k): why for k, why in detail.items()}) from None


def found_group(request: Request, name: str) -> ServiceGroup:
    """The named group of the key's workspace; InvalidGroup.NotFound otherwise."""
    group = visible_groups(request).filter(name=name).first()
    if group is None:
        raise EasError(
            "InvalidGroup.NotFound",
            f"Service group {name!r} does not exist (a group exists while a service names it "
            "in metadata.group).",
            404,
        )
    return group


def group(found_: ServiceGroup) -> dict[str, Any]:
    """A group as EAS's `Group` shows it. AccessToken is empty: a call to a group carries a
    member's token, and only its digest is kept."""
    shown = group_json(found_)
    endpoint = shown["endpoints"]["eas"]
    return {
        "Name": shown["name"], "ClusterId": answers.region(),
        "TrafficMode": shown["traffic_mode"],
        "InternetEndpoint": endpoint, "IntranetEndpoint": endpoint,
        "CreateTime": answers.eas_time(shown["created_at"]),
        "UpdateTime": answers.eas_time(shown["updated_at"]),
        "AccessToken": "", "QueueService": "",
    }  # fmt: skip


def endpoints(found_: ServiceGroup) -> list[dict[str, Any]]:
    """DescribeGroupEndpoints' list: the group's path on Wharf's gateway (EAS's shared one)."""
    url = group_json(found_)["endpoints"]["eas"]
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return [{"EndpointType": "DefaultGateway", "BackendId": "default", "PathType": "Group",
             "InternetEndpoints": [url], "IntranetEndpoints": [url], "Port": port}]  # fmt: skip


class Groups(EasView):
    """ListGroups: the key's workspace's groups by name, `Filter` a part of the name."""

    def get(self, request: Request) -> Response:
        params = request.query_params
        queries.only(params, ("Filter", "PageNumber", "PageSize", "WorkspaceId"))
        groups = visible_groups(request).order_by("name")
        if "WorkspaceId" in params:
            groups = groups.filter(workspace__name=params["WorkspaceId"])
        if params.get("Filter"):
            groups = groups.filter(name__icontains=params["Filter"])
        chosen, number, size = queries.page(params, groups, "PageNumber", "PageSize")
        return answer(Groups=[group(g) for g in chosen], TotalCount=groups.count(),
                      PageNumber=number, PageSize=size)  # fmt: skip


class GroupDetail(EasView):
    """DescribeGroup (GET), UpdateGroup (PUT) and DeleteGroup (DELETE)."""

    def get(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        return answer(**group(found_group(request, name)))

    def put(self, request: Request, cluster: str, name: str) -> Response:
        """UpdateGroup: `TrafficMode` auto (shares follow ready instances) or customized (the
        members' weights, set by ReleaseService)."""
        queries.only(request.query_params, ())
        found_group(request, name)
        change_group(request, name, checked(request.data, UPDATE_FIELDS, GroupChange))
        return answer(Message=f"Service group [{name}] updated")

    def delete(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ("CascadeDelete",))
        cascade = queries.flag(request.query_params, "CascadeDelete")
        members = [m["service"] for m in group_json(found_group(request, name))["members"]]
        if cascade:
            raise EasError("InvalidParameter", "CascadeDelete: Wharf deletes no service through "
                           "its group; delete each member with DeleteService")  # fmt: skip
        raise EasError(
            "InvalidOperation",
            f"Service group {name!r} exists while its members name it ({', '.join(members)}): "
            "remove metadata.group from their specs (UpdateService) or delete them; the group "
            "goes with its last member",
            409,
        )


class GroupEndpoints(EasView):
    """DescribeGroupEndpoints."""

    def get(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        listed = endpoints(found_group(request, name))
        return answer(Endpoints=listed, AccessToken="",
                      Message="a call to the group carries any member's token")  # fmt: skip


class ServiceRelease(EasView):
    """ReleaseService: a member's `Weight` (0-1000) in its group and its `TrafficState`
    (grouping: it takes the group's traffic; standalone: only its own endpoint's)."""

    def put(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        found(request, name)
        released = release(request, name, checked(request.data, RELEASE_FIELDS, Release))
        service = found(request, name)
        return answer(Message=f"Service [{name}] in group [{released.name}]: "
                      f"{service.traffic_state}, weight {service.group_weight}")  # fmt: skip
