from django.urls import path

from controlplane.usage.api import views

urlpatterns = [
    path("usage", views.Usage.as_view()),
]
