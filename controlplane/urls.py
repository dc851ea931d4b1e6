from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

urlpatterns = [
    path("api/v1/", include("controlplane.services.api.urls")),
    path("api/v1/", include("controlplane.tokens.api.urls")),
    path("api/v1/", include("controlplane.usage.api.urls")),
    path("api/v1/", include("controlplane.nodes.api.urls")),
    path("admin/", admin.site.urls),
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="frontend/login.html", redirect_authenticated_user=True
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("frontend.urls")),
]
