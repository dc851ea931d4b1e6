"""EAS's scaling calls: Create/Update/Describe/Delete ServiceAutoScaler (…/autoscaler) and
ServiceCronScaler (…/cronscaler). Each is a section of the spec (`autoscaler`:
contracts.spec_scaling; `cronscaler`: contracts.spec_cron, whose PascalCase API spelling
contracts.eas.spellings takes), so each change is a spec update through the v1 API's replace
(validated, a new version, an event) and the workers act on it as on any spec's."""

from __future__ import annotations

from typing import Any

from rest_framework.request import Request
from rest_framework.response import Response

from contracts.eas.written import eas_form
from controlplane.eas_api import queries
from controlplane.eas_api.errors import EasError
from controlplane.eas_api.views import EasView, answer, found, shared
from controlplane.services.api.views import replace_spec
from controlplane.services.secrets import redact


def _spec_with(request: Request, name: str, section: str, value: dict | None) -> Response:
    """The service's spec (as EAS writes it) with `section` set to `value`, or removed."""
    spec = eas_form(redact(found(request, name).spec))
    spec.pop(section, None)
    if isinstance(spec.get("metadata"), dict):
        spec["metadata"].pop(section, None)  # EAS's alias place: replaced, not merged
    if value is not None:
        spec[section] = value
    return replace_spec(request, name, spec)


class SpecSection(EasView):
    """One scaling section of a service's spec, by EAS's four calls."""

    section = ""  # the spec's key
    call = ""  # EAS's name in its calls: AutoScaler, CronScaler

    def describe(self, name: str, value: dict) -> dict[str, Any]:
        raise NotImplementedError

    def _current(self, request: Request, name: str) -> dict:
        value = found(request, name).spec.get(self.section)
        if not isinstance(value, dict):
            raise EasError(
                f"Invalid{self.call}.NotFound",
                f"Service {name!r} has no {self.section}; create one with "
                f"CreateService{self.call}.",
                404,
            )
        return value

    def _set(self, request: Request, name: str, done: str) -> Response:
        body = request.data
        if not isinstance(body, dict):
            raise EasError("InvalidParameter", f"the body must be the {self.section}'s object")
        message = f"{self.call} of service [{name}] {done}"
        changed = _spec_with(request, name, self.section, body)
        return shared(changed, lambda: answer(Message=message))

    def post(self, request: Request, cluster: str, name: str) -> Response:
        """Create: refused where the service has one (update it instead)."""
        queries.only(request.query_params, ())
        if isinstance(found(request, name).spec.get(self.section), dict):
            raise EasError(
                "InvalidParameter",
                f"Service {name!r} has a {self.section}; change it with UpdateService{self.call}.",
            )
        return self._set(request, name, "created")

    def put(self, request: Request, cluster: str, name: str) -> Response:
        """Update: the body replaces the section."""
        queries.only(request.query_params, ())
        self._current(request, name)
        return self._set(request, name, "updated")

    def get(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        return answer(ServiceName=name, **self.describe(name, self._current(request, name)))

    def delete(self, request: Request, cluster: str, name: str) -> Response:
        queries.only(request.query_params, ())
        self._current(request, name)
        message = f"{self.call} of service [{name}] deleted"
        removed = _spec_with(request, name, self.section, None)
        return shared(removed, lambda: answer(Message=message))


class ServiceAutoscaler(SpecSection):
    section, call = "autoscaler", "AutoScaler"

    def describe(self, name: str, value: dict) -> dict[str, Any]:
        return {
            "MinReplica": value.get("min"), "MaxReplica": value.get("max"),
            "ScaleStrategies": value.get("scaleStrategies", []),
            "Behavior": value.get("behavior", {}),
            "CurrentMetrics": [],  # the gateways' figures are not kept per strategy here
        }  # fmt: skip


class ServiceCronscaler(SpecSection):
    section, call = "cronscaler", "CronScaler"

    def describe(self, name: str, value: dict) -> dict[str, Any]:
        jobs = [
            {"Name": job.get("name"), "Schedule": job.get("schedule"),
             "TargetSize": job.get("targetSize"), "TimeZone": job.get("timeZone", "UTC")}
            for job in value.get("scaleJobs", [])
        ]  # fmt: skip
        return {"ScaleJobs": jobs, "ExcludeDates": value.get("excludeDates", [])}
