from django.urls import path

from controlplane.audit import views

urlpatterns = [path("audit", views.Audit.as_view())]
