"""The console's sign-in, rate limited: failed attempts are counted in Redis per username and
per client address over a window (WHARF_SIGNIN_ATTEMPTS, WHARF_SIGNIN_WINDOW), shared by every
API process; past either count the form answers 429 without checking the password, until the
window ends. A success clears the username's count. If Redis cannot be reached, sign-in goes on
uncounted (logged): an outage must not lock every operator out.

With single sign-on configured (controlplane.sso) the page offers it too, and with
WHARF_LOCAL_LOGIN=false it offers only that: a password sent anyway is refused (403), as the
password backend is not installed then either."""

from __future__ import annotations

import hashlib
import logging

import redis
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse

log = logging.getLogger(__name__)

PREFIX = "wharf:signin:"
PER_ADDRESS = 3  # an address may fail this many times the per-user count (a shared NAT)
# ?sso=... when single sign-on came back without a user (controlplane.sso.views, settings).
SSO_ERRORS = {
    "failed": "Single sign-on did not complete; try again, or ask an administrator whether "
    "your account may use Wharf.",
    "unavailable": "The identity provider did not answer; try again in a moment.",
}
LOCAL_LOGIN_OFF = "Password sign-in is turned off on this Wharf; sign in with {label}."


def _keys(request: HttpRequest) -> tuple[str, str]:
    username = request.POST.get("username", "")[:150].lower()
    # Digests: no username or address is kept in Redis in the clear.
    user = hashlib.sha256(username.encode()).hexdigest()[:32]
    address = hashlib.sha256(request.META.get("REMOTE_ADDR", "").encode()).hexdigest()[:32]
    return f"{PREFIX}user:{user}", f"{PREFIX}addr:{address}"


class SignIn(auth_views.LoginView):
    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context.update(
            sso_label=settings.WHARF_OIDC_LABEL if settings.WHARF_OIDC_ISSUER else None,
            local_login=settings.WHARF_LOCAL_LOGIN,
            sso_error=SSO_ERRORS.get(self.request.GET.get("sso", "")),
        )
        return context

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
        if not settings.WHARF_LOCAL_LOGIN:
            refused = LOCAL_LOGIN_OFF.format(label=settings.WHARF_OIDC_LABEL)
            form = self.get_form_class()(request)  # unbound: the password is not checked
            response = self.render_to_response(self.get_context_data(form=form, refused=refused))
            response.status_code = 403
            return response
        limit, window = settings.WHARF_SIGNIN_ATTEMPTS, settings.WHARF_SIGNIN_WINDOW
        user_key, address_key = _keys(request)
        try:
            client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2)
            failures = client.mget(user_key, address_key)
            user_failures, address_failures = (int(f or 0) for f in failures)
        except redis.RedisError as exc:
            log.warning("sign-in attempts not counted: Redis did not answer: %s", exc)
            return super().post(request, *args, **kwargs)
        if user_failures >= limit or address_failures >= limit * PER_ADDRESS:
            wait = max(client.ttl(user_key), client.ttl(address_key), 1)
            form = self.get_form_class()(request)  # unbound: the password is not checked
            throttled = f"Too many failed sign-ins; try again in {wait} s."
            response = self.render_to_response(
                self.get_context_data(form=form, throttled=throttled)
            )
            response.status_code = 429
            response["Retry-After"] = str(wait)
            return response
        response = super().post(request, *args, **kwargs)
        with client.pipeline() as pipe:
            if response.status_code == 302:  # signed in
                pipe.delete(user_key)
            else:
                for key in (user_key, address_key):
                    pipe.incr(key)
                    pipe.expire(key, window, nx=True)
            try:
                pipe.execute()
            except redis.RedisError as exc:
                log.warning("sign-in attempt not counted: %s", exc)
        return response
