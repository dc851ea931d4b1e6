from django.urls import path

from controlplane.queues.api import ServiceQueue
from controlplane.services.api import adapters, canary, groups, mirror, versions, views, webapp
from controlplane.services.api.estimate import Estimate
from controlplane.services.api.instances import ServiceInstance
from controlplane.services.api.logs import InstanceLogs
from controlplane.services.api.schema import SpecSchema

urlpatterns = [
    path("estimate", Estimate.as_view()),
    path("schema/spec", SpecSchema.as_view()),
    path("services", views.ServiceList.as_view()),
    path("services/preview", views.SpecPreview.as_view()),
    path("services/<str:name>", views.ServiceDetail.as_view()),
    path("services/<str:name>/instances", views.ServiceInstances.as_view()),
    path("services/<str:name>/instances/<str:instance>", ServiceInstance.as_view()),
    path("services/<str:name>/instances/<str:instance>/logs", InstanceLogs.as_view()),
    path("services/<str:name>/events", views.ServiceEvents.as_view()),
    path("services/<str:name>/token", views.RotateServiceToken.as_view()),
    path("services/<str:name>/versions", versions.ServiceVersions.as_view()),
    path("services/<str:name>/versions/<str:number>", versions.ServiceVersionDetail.as_view()),
    path("services/<str:name>/rollback", versions.Rollback.as_view()),
    path("services/<str:name>/adapters", adapters.ServiceAdapters.as_view()),
    path("services/<str:name>/adapters/<str:adapter>", adapters.ServiceAdapter.as_view()),
    path("services/<str:name>/web-ticket", webapp.WebTicket.as_view()),
    path("services/<str:name>/release", groups.ServiceRelease.as_view()),
    path("services/<str:name>/mirror", mirror.ServiceMirror.as_view()),
    path("services/<str:name>/queue", ServiceQueue.as_view()),
    path("services/<str:name>/canary", canary.ServiceCanary.as_view()),
    path("services/<str:name>/canary/<str:action>", canary.CanaryAction.as_view()),
    path("groups", groups.GroupList.as_view()),
    path("groups/<str:group>", groups.GroupDetail.as_view()),
    # Last: any other word after the name is an action (start, stop).
    path("services/<str:name>/<str:action>", views.ServiceAction.as_view()),
]
