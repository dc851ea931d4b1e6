from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from controlplane.services.choices import DesiredState
from controlplane.services.models import Service


@login_required
def home(request):
    """A placeholder console: the services and how to reach them (the full console comes later)."""
    services = Service.objects.exclude(desired_state=DesiredState.DELETED)
    return render(
        request,
        "frontend/home.html",
        {"services": services, "gateway": settings.WHARF_GATEWAY_URL.rstrip("/")},
    )
