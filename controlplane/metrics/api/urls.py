from django.urls import path

from controlplane.metrics.api.views import MetricsTargets, ServiceMetrics

# Included before the services' URLs, whose last pattern takes any services/<name>/<action>.
urlpatterns = [
    path("services/<str:name>/metrics", ServiceMetrics.as_view()),
    path("metrics/targets", MetricsTargets.as_view()),
]
