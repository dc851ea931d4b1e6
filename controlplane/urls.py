from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

import controlplane.openapi  # noqa: F401  (describes every view to the schema)
from frontend.signin import SignIn

urlpatterns = [
    # Before the services' URLs: their last pattern takes any services/<name>/<action>.
    path("api/v1/", include("controlplane.benchmarks.api.urls")),
    path("api/v1/", include("controlplane.metrics.api.urls")),
    path("api/v1/", include("controlplane.services.api.urls")),
    path("api/v1/", include("controlplane.tokens.api.urls")),
    path("api/v1/", include("controlplane.usage.api.urls")),
    path("api/v1/", include("controlplane.nodes.api.urls")),
    path("api/v1/", include("controlplane.workspaces.api.urls")),
    path("api/v1/", include("controlplane.audit.urls")),
    path("api/v1/", include("controlplane.batches.api_urls")),
    path("api/v1/", include("controlplane.eas_api.keys_urls")),
    path("api/v2/", include("controlplane.eas_api.urls")),
    path("internal/", include("controlplane.queues.urls")),  # the gateways' only
    path("internal/", include("controlplane.batches.urls")),  # the gateways' only
    path("api/schema/", SpectacularAPIView.as_view(), name="openapi"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="openapi"), name="api-docs"),
    path("admin/", admin.site.urls),
    path("login/", SignIn.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Single sign-on: oidc/authenticate/ sends to the provider, oidc/callback/ comes back.
    path("oidc/", include("mozilla_django_oidc.urls")),
    path("", include("frontend.urls")),
]
