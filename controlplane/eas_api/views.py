"""EAS's service calls (OpenAPI 2021-07-01), answered by the v1 API's own service logic
(controlplane.services.api.views): the same validation, grants, quotas, versions, events and
audit; only the request and the answer are in EAS's shape. ClusterId (EAS's region) is
accepted as any value: this Wharf is the one cluster."""

from __future__ import annotations

from collections.abc import Callable

from django.db.models import Max
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts.eas.updates import merged
from contracts.eas.written import eas_form
from controlplane.eas_api import answers, queries
from controlplane.eas_api.authentication import AccessKeySignature
from controlplane.eas_api.errors import EasError, exception_handler, refusal, request_id
from controlplane.services.api import views as v1
from controlplane.services.models import Service
from controlplane.services.secrets import redact
from controlplane.workspaces.access import access
from controlplane.workspaces.models import Workspace

UPDATE_TYPES = ("merge", "replace")


def answer(status: int = 200, **fields) -> Response:
    return Response({"RequestId": request_id(), **fields}, status=status)


def shared(response: Response, shape: Callable[[], Response]) -> Response:
    """The v1 logic's answer in EAS's shape: its refusal translated, else `shape()`."""
    if response.status_code >= 400:
        return refusal(response.status_code, response.data)
    return shape()


def found(request: Request, name: str) -> Service:
    """The named service of the key's workspace; InvalidService.NotFound otherwise (another
    workspace's service is as absent as one that never was)."""
    service = v1.visible_services(request).filter(name=name).first()
    if service is None:
        raise EasError("InvalidService.NotFound", f"Service {name!r} does not exist.", 404)
    return service


class EasView(APIView):
    """Signed with an access key pair; refusals in EAS's shape."""

    authentication_classes = [AccessKeySignature]
    schema = None  # EAS's OpenAPI, not Wharf's: Alibaba's documents describe it

    def get_exception_handler(self):
        return exception_handler


def _check_workspace(request: Request) -> None:
    """CreateService's WorkspaceId, where given, must be the key's own workspace."""
    wanted = request.query_params.get("WorkspaceId")
    acting: Workspace = access(request).workspace
    if wanted is not None and wanted != acting.name:
        raise EasError(
            "InvalidParameter",
            f"WorkspaceId {wanted!r}: this access key acts in workspace {acting.name!r}; "
            "use a key of that workspace (manage.py create_access_key --workspace)",
        )


LIST_PARAMETERS = ("PageNumber", "PageSize", "ServiceName", "Filter", "ServiceStatus", "Label",
                   "WorkspaceId", "Sort", "Order")  # fmt: skip


class Services(EasView):
    """CreateService (POST) and ListServices (GET) at /api/v2/services."""

    def post(self, request: Request) -> Response:
        queries.only(request.query_params, ("Develop", "Labels", "WorkspaceId"))
        if queries.flag(request.query_params, "Develop"):
            raise EasError("InvalidParameter", "Develop: Wharf has no develop mode; omit it")
        _check_workspace(request)
        sent = request.data
        if labels := queries.labels(request.query_params, "Labels"):
            if not isinstance(sent, dict):
                raise EasError("InvalidParameter", "the body must be a service's JSON object")
            sent = {**sent, "labels": {**(sent.get("labels") or {}), **labels}}
        created = v1.create_service(request, sent)

        def shape() -> Response:
            service = Service.objects.get(name=created.data["name"])
            shown = answers.service(service)
            return answer(
                ServiceId=shown["ServiceId"], ServiceName=service.name, Status=shown["Status"],
                Region=shown["Region"], InternetEndpoint=shown["InternetEndpoint"],
                IntranetEndpoint=shown["IntranetEndpoint"],
                AccessToken=created.data["token"],  # shown once, as by the v1 API
                Warnings=created.data.get("warnings", []),
            )  # fmt: skip

        return shared(created, shape)

    def get(self, request: Request) -> Response:
        params = request.query_params
        queries.only(params, LIST_PARAMETERS)
        services = v1.visible_services(request).annotate(current_version=Max("versions__number"))
        if "WorkspaceId" in params:
            services = services.filter(workspace__name=params["WorkspaceId"])
        for name in ("ServiceName", "Filter"):  # EAS: a name's part, either way
            if params.get(name):
                services = services.filter(name__icontains=params[name])
        services = services.order_by(*_ordering(params))
        shown = [answers.service(service) for service in services]
        if status := params.get("ServiceStatus"):
            shown = [s for s in shown if s["Status"] == status]
        if wanted := queries.labels(params, "Label"):
            shown = [s for s in shown if _labelled(s, wanted)]
        chosen, number, size = queries.page(params, shown, "PageNumber", "PageSize")
        return answer(Services=chosen, TotalCount=len(shown), PageNumber=number, PageSize=size)


SORTS = {"CreateTime": "created_at", "UpdateTime": "updated_at", "ServiceName": "name"}


def _ordering(params) -> list[str]:
    sort = params.get("Sort", "CreateTime")
    order = params.get("Order", "desc").lower()
    if sort not in SORTS or order not in ("asc", "desc"):
        raise EasError("InvalidParameter", f"Sort: one of {', '.join(SORTS)}; Order: asc or desc")
    return [("-" if order == "desc" else "") + SORTS[sort], "name"]


def _labelled(shown: dict, wanted: dict[str, str]) -> bool:
    has = {label["LabelKey"]: label["LabelValue"] for label in shown["Labels"]}
    return all(has.get(key) == value for key, value in wanted.items())


class ServiceDetail(EasView):
    """DescribeService (GET), UpdateService (PUT) and DeleteService (DELETE)."""

    def get(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        service = found(request, name)
        return answer(**answers.service(service))

    def put(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ("UpdateType",))
        update_type = request.query_params.get("UpdateType", "merge")
        if update_type not in UPDATE_TYPES:
            raise EasError("InvalidParameter", "UpdateType: merge or replace")
        change = request.data
        if update_type == "merge":
            change = merged(eas_form(redact(found(request, name).spec)), change)
        return shared(v1.replace_spec(request, name, change),
                      lambda: answer(Message="Succeed"))  # fmt: skip

    def delete(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        found(request, name)
        message = f"Service [{name}] in region [{answers.region()}] is terminating"
        return shared(v1.delete_service(request, name), lambda: answer(Message=message))


class ServiceState(EasView):
    """StartService and StopService: PUT …/start, …/stop."""

    def put(self, request: Request, cluster: str, name: str, action: str) -> Response:
        queries.only(request.query_params, ())
        if action not in ("start", "stop"):
            raise EasError("InvalidAction.NotFound", f"no call {action!r} on a service", 404)
        found(request, name)
        return shared(v1.change_state(request, name, action),
                      lambda: answer(Message=f"Service [{name}] {action} requested"))  # fmt: skip
