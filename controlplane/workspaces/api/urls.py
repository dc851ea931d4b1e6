from django.urls import path

from controlplane.workspaces.api import grants, views

urlpatterns = [
    path("workspaces", views.WorkspaceList.as_view()),
    path("workspaces/<str:workspace>", views.WorkspaceDetail.as_view()),
    path("workspaces/<str:workspace>/grants", grants.WorkspaceGrants.as_view()),
    path("workspaces/<str:workspace>/members", views.MemberList.as_view()),
    path("workspaces/<str:workspace>/members/<str:user>", views.MemberDetail.as_view()),
]
