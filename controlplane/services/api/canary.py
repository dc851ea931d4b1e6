"""Canary releases in the REST API (contracts.canary; judged by workers.scheduling.canaries):

- POST /services/<name>/canary            {"spec", "steps", "interval_s", "max_error_rate",
                                           "max_ttft_ratio", "max_itl_ratio", "min_requests"}:
                                           the new version starts beside the stable one (quota
                                           permitting), then takes steps[0] % of the calls;
- GET  /services/<name>/canary            the latest release: state, step, weight, the last
                                           judgement and both sides' figures since its step began;
- POST /services/<name>/canary/<action>   pause, resume, promote or abort, by hand.
"""

from __future__ import annotations

from django.db import transaction
from django.shortcuts import get_object_or_404
from django.utils import timezone
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from contracts import canary as canaries
from contracts.spec_job import is_job
from controlplane import intents
from controlplane.services.api.errors import SpecInvalid
from controlplane.services.api.groups import valid_body
from controlplane.services.api.views import _canonical, _validated, live_service
from controlplane.services.canaries import finish, note, promote
from controlplane.services.models import Canary, Service
from controlplane.services.names import check_model_names
from controlplane.services.sealing import seal, unseal
from controlplane.services.secrets import SecretsLostError, keep_secrets
from controlplane.workspaces.quota_checks import check_quotas

ACTIONS = ("pause", "resume", "promote", "abort")


class CanaryStart(serializers.Serializer):
    spec = serializers.JSONField(help_text="the new version's spec (the service's name)")
    steps = serializers.ListField(
        child=serializers.IntegerField(min_value=1, max_value=100),
        default=[10, 50, 100],
        help_text="rising percentages, to 100",
    )
    interval_s = serializers.IntegerField(min_value=10, max_value=86400, default=60)
    max_error_rate = serializers.FloatField(min_value=0, max_value=1, default=0.01)
    max_ttft_ratio = serializers.FloatField(min_value=1, max_value=1000, default=1.5)
    max_itl_ratio = serializers.FloatField(min_value=1, max_value=1000, default=1.3)
    min_requests = serializers.IntegerField(min_value=1, max_value=1_000_000, default=50)


class CanaryState(serializers.Serializer):
    state = serializers.ChoiceField(choices=canaries.STATES)
    steps = serializers.ListField(child=serializers.IntegerField())
    step = serializers.IntegerField()
    weight = serializers.IntegerField(help_text="the canary's share of the calls now, percent")
    interval_s = serializers.IntegerField()
    bounds = serializers.DictField()
    message = serializers.CharField(help_text="the last judgement, in words")
    figures = serializers.DictField(help_text="canary and stable: requests, errors, TTFT, ITL")
    step_started_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


def canary_json(release: Canary) -> dict:
    return {
        "state": release.state, "steps": release.steps, "step": release.step,
        "weight": release.weight, "interval_s": release.interval_s,
        "bounds": {"max_error_rate": release.max_error_rate,
                   "max_ttft_ratio": release.max_ttft_ratio,
                   "max_itl_ratio": release.max_itl_ratio, "min_requests": release.min_requests},
        "message": release.message, "figures": release.figures,
        "step_started_at": release.step_started_at, "created_at": release.created_at,
    }  # fmt: skip


def _release_spec(service: Service, sent) -> tuple[dict, str]:
    """The new version's spec, canonical, validated and sealed, and its hash; 400 naming the
    field (as `spec.<field>`) when it is not one the service can release."""
    try:
        data = _canonical(sent)
        if isinstance(data, dict) and data.get("name", service.name) != service.name:
            raise SpecInvalid({"name": [f"a canary is a new version of {service.name!r}: "
                                        "the same name"]})  # fmt: skip
        data = {**data, "name": service.name} if isinstance(data, dict) else data
        data = seal(keep_secrets(data, service.spec))
        spec = _validated(unseal(data), service.workspace)
    except SecretsLostError as exc:
        raise SpecInvalid({f"spec.{k}": v for k, v in exc.errors.items()}) from None
    except SpecInvalid as exc:
        raise SpecInvalid({f"spec.{k}": v for k, v in exc.errors.items()}) from None
    current = service.parsed_spec()
    if is_job(current) or is_job(spec):
        raise SpecInvalid({"spec.metadata.workload_type": [
            "a job takes no calls, so there is nothing to judge a canary on"]})  # fmt: skip
    if spec.spec_hash() == current.spec_hash():
        raise SpecInvalid({"spec": ["it runs as the service's own: nothing to release"]})
    if spec.served_model_names != current.served_model_names:
        raise SpecInvalid({"spec.llm.served_model_name": [
            "a canary serves the service's own model names, "
            f"{list(current.served_model_names)}"]})  # fmt: skip
    check_model_names(spec, service.workspace, service)  # its adapters, claimed when promoted
    check_quotas(service.workspace, spec, running=True)  # beside the stable side
    return data, spec.spec_hash()


class ServiceCanary(APIView):
    def get(self, request: Request, name: str) -> Response:
        service = live_service(request, name)
        release = service.canaries.first()
        if release is None:
            raise NotFound(f"service {name!r} has had no canary release")
        return Response(canary_json(release))

    def post(self, request: Request, name: str) -> Response:
        data = valid_body(request, CanaryStart)
        problem = canaries.check_steps(data["steps"])
        if problem:
            raise ValidationError({"steps": [problem]})
        with transaction.atomic():
            service = live_service(request, name)
            Service.objects.select_for_update().filter(pk=service.pk).first()
            if service.canaries.filter(state__in=canaries.ACTIVE).exists():
                return Response({"detail": f"service {name!r} has a canary release under way: "
                                 "promote or abort it first"}, status=409)  # fmt: skip
            spec, spec_hash = _release_spec(service, data.pop("spec"))
            release = Canary.objects.create(service=service, spec=spec, spec_hash=spec_hash,
                                            actor=str(request.user), **data)  # fmt: skip
            note(release, "CanaryStarted", f"the new version starts beside the stable one; "
                 f"steps {', '.join(map(str, release.steps))}% every {release.interval_s} s",
                 str(request.user))  # fmt: skip
            transaction.on_commit(lambda: intents.reconcile_service(name), robust=True)
        return Response(canary_json(release), status=status.HTTP_201_CREATED)


class CanaryAction(APIView):
    """POST /services/<name>/canary/pause|resume|promote|abort."""

    def post(self, request: Request, name: str, action: str) -> Response:
        if action not in ACTIONS:
            raise NotFound(f"unknown action {action!r}; use {', '.join(ACTIONS)}")
        who = str(request.user)
        with transaction.atomic():
            service = live_service(request, name)
            release = get_object_or_404(
                service.canaries.select_for_update(), state__in=canaries.ACTIVE
            )
            if action == "pause":
                if release.state == canaries.PAUSED:
                    return Response(canary_json(release))
                release.state, release.message = canaries.PAUSED, f"paused by {who}"
                release.save()
                note(release, "CanaryPaused", f"held at {release.weight}% by hand", who)
            elif action == "resume":
                if release.state != canaries.PAUSED:
                    raise ValidationError({"state": [f"it is {release.state}, not paused"]})
                release.state, release.step_started_at = canaries.RUNNING, timezone.now()
                release.message = f"resumed by {who}; measuring afresh"
                release.save()
                note(release, "CanaryResumed", f"{release.weight}% of calls; judged afresh", who)
            elif action == "promote":
                promote(release, f"promoted by {who}", who)
            else:
                finish(release, canaries.ABORTED, f"aborted by {who}", who)
            transaction.on_commit(lambda: intents.reconcile_service(name), robust=True)
        release.refresh_from_db()
        return Response(canary_json(release))
