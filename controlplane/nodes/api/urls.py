from django.urls import path

from controlplane.nodes.api import views

urlpatterns = [
    path("nodes", views.NodeList.as_view()),
    path("beat", views.BeatLeader.as_view()),
    path("nodes/<str:name>", views.NodeDetail.as_view()),
    path("nodes/<str:name>/<str:action>", views.NodeAction.as_view()),
]
