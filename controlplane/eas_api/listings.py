"""EAS's calls about one service's parts: ListServiceInstances, DescribeServiceEvent,
ListServiceVersions and UpdateServiceVersion (a switch to an earlier version is the v1
API's rollback: that version's spec becomes a new version)."""

from __future__ import annotations

import math

from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.eas_api import answers, queries
from controlplane.eas_api.errors import EasError
from controlplane.eas_api.views import EasView, answer, found, shared
from controlplane.services.api.versions import roll_back
from controlplane.services.api.views import visible_services


class ServiceInstances(EasView):
    def get(self, request: Request, cluster: str, name: str) -> Response:
        params = request.query_params
        queries.only(params, ("PageNumber", "PageSize", "InstanceName", "InstanceStatus",
                              "Role", "InstanceIP", "HostIP"))  # fmt: skip
        instances = found(request, name).instances.order_by("name")
        if params.get("InstanceName"):
            instances = instances.filter(name__icontains=params["InstanceName"])
        if "Role" in params:
            instances = instances.filter(role=params["Role"])
        shown = [answers.instance(instance) for instance in instances]
        for param, field in (("InstanceStatus", "Status"), ("InstanceIP", "InnerIP"),
                             ("HostIP", "HostIP")):  # fmt: skip
            if param in params:
                shown = [s for s in shown if s[field] == params[param]]
        chosen, number, size = queries.page(params, shown, "PageNumber", "PageSize")
        return answer(Instances=chosen, TotalCount=len(shown), PageNumber=number, PageSize=size)


class ServiceEvents(EasView):
    def get(self, request: Request, cluster: str, name: str) -> Response:
        params = request.query_params
        queries.only(params, ("PageNum", "PageSize", "StartTime", "EndTime", "EventType",
                              "InstanceName"))  # fmt: skip
        service = visible_services(request, live=False).filter(name=name).first()
        if service is None:
            raise EasError("InvalidService.NotFound", f"Service {name!r} does not exist.", 404)
        events = service.events.order_by("-id")
        if (start := queries.moment(params, "StartTime")) is not None:
            events = events.filter(created_at__gte=start)
        if (end := queries.moment(params, "EndTime")) is not None:
            events = events.filter(created_at__lte=end)
        if "InstanceName" in params:
            events = events.filter(instance=params["InstanceName"])
        shown = [answers.event(event) for event in events]
        if kind := params.get("EventType"):
            if kind not in ("Normal", "Warning"):
                raise EasError("InvalidParameter", "EventType: Normal or Warning")
            shown = [s for s in shown if s["Type"] == kind]
        chosen, number, size = queries.page(params, shown, "PageNum", "PageSize")
        return answer(Events=chosen, PageNum=number, TotalCount=len(shown),
                      TotalPageNum=math.ceil(len(shown) / size))  # fmt: skip


class ServiceVersions(EasView):
    def get(self, request: Request, cluster: str, name: str) -> Response:
        params = request.query_params
        queries.only(params, ("PageNumber", "PageSize"))
        versions = found(request, name).versions.order_by("-number")
        shown = [answers.version(version) for version in versions]
        chosen, number, size = queries.page(params, shown, "PageNumber", "PageSize")
        return answer(Versions=chosen, TotalCount=len(shown), PageNumber=number, PageSize=size)


class ServiceVersion(EasView):
    def put(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        body = request.data
        wanted = body.get("Version") if isinstance(body, dict) else None
        if type(wanted) is not int or wanted < 1:
            raise EasError("InvalidParameter", "Version: a whole number of 1 or more")
        found(request, name)
        message = f"Service [{name}] switched to version {wanted}"
        return shared(roll_back(request, name, wanted), lambda: answer(Message=message))
