"""The start of a single sign-on: mozilla-django-oidc's request view, sent to the
authorization endpoint the provider's discovery document names."""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import Http404, HttpResponseRedirect
from mozilla_django_oidc.views import OIDCAuthenticationRequestView

from controlplane.sso.discovery import DiscoveryError, oidc_setting

log = logging.getLogger(__name__)
UNAVAILABLE = "/login/?sso=unavailable"  # the sign-in page says the provider did not answer


class SignInRequest(OIDCAuthenticationRequestView):
    get_settings = staticmethod(oidc_setting)

    def __init__(self, *args, **kwargs) -> None:
        # The endpoints are read in get(), where a provider that does not answer is a message
        # on the sign-in page rather than an error page.
        super(OIDCAuthenticationRequestView, self).__init__(*args, **kwargs)

    def get(self, request):
        if not settings.WHARF_OIDC_ISSUER:
            raise Http404("single sign-on is not configured (WHARF_OIDC_ISSUER)")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = self.get_settings("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except DiscoveryError as exc:
            log.warning("single sign-on unavailable: %s", exc)
            return HttpResponseRedirect(UNAVAILABLE)
        self.OIDC_RP_CLIENT_ID = self.get_settings("OIDC_RP_CLIENT_ID")
        return super().get(request)
