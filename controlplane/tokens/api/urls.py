from django.urls import path

from controlplane.tokens.api import views

urlpatterns = [
    path("keys", views.KeyList.as_view()),
    path("keys/<str:key_id>", views.KeyDetail.as_view()),
]
