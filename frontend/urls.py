from django.urls import path

from frontend import online_test, views

urlpatterns = [
    path("", views.services, name="services"),
    path("deploy/", views.deploy, name="deploy"),
    path("nodes/", views.nodes, name="nodes"),
    path("groups/", views.groups, name="groups"),
    path("keys/", views.keys, name="keys"),
    path("workspace/", views.workspace, name="workspace"),
    path("usage/", views.usage, name="usage"),
    path("audit/", views.audit, name="audit"),
    path("batches/", views.batches, name="batches"),
    path("console/workspace", views.switch_workspace, name="switch-workspace"),
    path("services/<str:name>/", views.service, name="service"),
    path("console/services/<str:name>/test", online_test.test_call, name="online-test"),
    path("console/services/<str:name>/web", views.web_ui, name="web-ui"),
]
