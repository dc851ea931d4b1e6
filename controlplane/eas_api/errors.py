"""Every answer of the EAS API carries a RequestId; every refusal is EAS's shape,
{"RequestId", "Code", "Message"}, with the HTTP status EAS answers with. Refusals raised by
the shared v1 service logic (its own {"detail", "errors"} shape) are translated here, so
the two APIs refuse the same things for the same reasons."""

from __future__ import annotations

import uuid

from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.workspaces.quota_checks import OverQuota

# Alibaba's codes by HTTP status, for refusals that name none of their own.
CODES = {
    400: "InvalidParameter",
    401: "InvalidAccessKeyId",
    403: "Forbidden.PrivilegeCheckFailed",
    404: "InvalidService.NotFound",
    405: "UnsupportedHTTPMethod",
    409: "InvalidService.Conflict",
    415: "InvalidParameter",
    429: "Throttling",
}


def request_id() -> str:
    return str(uuid.uuid4()).upper()


class EasError(exceptions.APIException):
    """A refusal with EAS's code."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.eas_code, self.message, self.status_code = code, message, status


def message_of(data) -> str:
    """One line from a v1 refusal's body: its detail, then each field's complaints."""
    if not isinstance(data, dict):
        return str(data)
    detail = str(data.get("detail", "")).strip()
    errors = data.get("errors") or {k: v for k, v in data.items() if k != "detail"}
    fields = "; ".join(
        f"{field}: {' '.join(map(str, why)) if isinstance(why, list) else why}"
        for field, why in errors.items()
    ) if isinstance(errors, dict) else str(errors)  # fmt: skip
    return " ".join(part for part in (detail, fields) if part) or "The request was refused."


def refusal(status: int, data, code: str | None = None) -> Response:
    body = {"RequestId": request_id(), "Code": code or CODES.get(status, "InternalError"),
            "Message": message_of(data)}  # fmt: skip
    return Response(body, status=status)


def exception_handler(exc, context):
    """The EAS API's views' handler: EasError as it is; anything DRF or the v1 logic raises
    through DRF's own handler (and the v1 shape), then into EAS's."""
    if isinstance(exc, EasError):
        return refusal(exc.status_code, {"detail": exc.message}, exc.eas_code)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound(str(exc) or "The service does not exist.")
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a 500: Django's own page, logged
    code = "QuotaExceeded" if isinstance(exc, OverQuota) else None
    return refusal(response.status_code, response.data, code)
