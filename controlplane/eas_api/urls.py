"""EAS's OpenAPI paths (2021-07-01), as alibabacloud-eas20210701 calls them."""

from django.urls import path

from controlplane.eas_api import groups, labels, listings, mirror, scaling, views

SERVICE = "services/<str:cluster>/<str:name>"
GROUP = "groups/<str:cluster>/<str:name>"

urlpatterns = [
    path("services", views.Services.as_view()),
    path(SERVICE, views.ServiceDetail.as_view()),
    path(f"{SERVICE}/instances", listings.ServiceInstances.as_view()),
    path(f"{SERVICE}/events", listings.ServiceEvents.as_view()),
    path(f"{SERVICE}/versions", listings.ServiceVersions.as_view()),
    path(f"{SERVICE}/version", listings.ServiceVersion.as_view()),
    path(f"{SERVICE}/autoscaler", scaling.ServiceAutoscaler.as_view()),
    path(f"{SERVICE}/cronscaler", scaling.ServiceCronscaler.as_view()),
    path(f"{SERVICE}/label", labels.ServiceLabels.as_view()),
    path(f"{SERVICE}/release", groups.ServiceRelease.as_view()),
    path(f"{SERVICE}/mirror", mirror.ServiceMirror.as_view()),
    path("groups", groups.Groups.as_view()),
    path(GROUP, groups.GroupDetail.as_view()),
    path(f"{GROUP}/endpoints", groups.GroupEndpoints.as_view()),
    # Last: any other word after the name is a state change (start, stop).
    path(f"{SERVICE}/<str:action>", views.ServiceState.as_view()),
]
