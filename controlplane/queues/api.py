"""An Async service's queues in the REST API: GET /api/v1/services/<name>/queue, for anyone who
may see the service: its window and redelivery bound, the input queue (items pending, in work,
the oldest pending item's age, those given back and waiting to go again) and the sink (answers
waiting to be taken, failures). Callers use the queues themselves through the gateway (EAS's
queue API: gateway.queues)."""

from __future__ import annotations

from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.queues import store
from controlplane.services.api.views import live_service


class QueueSide(serializers.Serializer):
    max_length = serializers.IntegerField()
    max_payload_size_kb = serializers.IntegerField()


class InputFigures(QueueSide):
    pending = serializers.IntegerField(help_text="items waiting for an instance")
    working = serializers.IntegerField(help_text="items an instance works on now")
    oldest_pending_s = serializers.FloatField(help_text="age of the oldest waiting item")
    redelivering = serializers.IntegerField(help_text="items given back, waiting to go again")


class SinkFigures(QueueSide):
    length = serializers.IntegerField(help_text="answers waiting to be taken")
    failed = serializers.IntegerField(help_text="answers that are failures after max_delivery")


class QueueFigures(serializers.Serializer):
    window = serializers.IntegerField(help_text="items one instance works on at once")
    max_delivery = serializers.IntegerField()
    input = InputFigures()
    sink = SinkFigures()


class ServiceQueue(APIView):
    def get(self, request: Request, name: str) -> Response:
        service = live_service(request, name)
        try:
            return Response(store.figures(service))
        except store.QueueRefusal as exc:
            return Response({"detail": exc.message}, status=exc.status)
