from django.urls import path

from controlplane.queues import internal

urlpatterns = [
    path("queues/lease", internal.lease),
    path("queues/finish", internal.finish),
    path("queues/renew", internal.renew),
    path("queues/<str:service>/<str:queue>/watch", internal.watch),
    path("queues/<str:service>/<str:queue>", internal.queue_call),
]
