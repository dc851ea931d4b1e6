from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("api/v1/", include("controlplane.services.api.urls")),
    path("api/v1/", include("controlplane.tokens.api.urls")),
    path("api/v1/", include("controlplane.usage.api.urls")),
    path("admin/", admin.site.urls),
    path("", include("frontend.urls")),
]
