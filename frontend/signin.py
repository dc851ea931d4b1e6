"""The console's sign-in, rate limited: failed attempts are counted in Redis per username and
per client address over a window (WHARF_SIGNIN_ATTEMPTS, WHARF_SIGNIN_WINDOW), shared by every
API process; past either count the form answers 429 without checking the password, until the
window ends. A success clears the username's count. If Redis cannot be reached, sign-in goes on
uncounted (logged): an outage must not lock every operator out."""

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


def _keys(request: HttpRequest) -> tuple[str, str]:
    username = request.POST.get("username", "")[:150].lower()
    # Digests: no username or address is kept in Redis in the clear.
    user = hashlib.sha256(username.encode()).hexdigest()[:32]
    address = hashlib.sha256(request.META.get("REMOTE_ADDR", "").encode()).hexdigest()[:32]
    return f"{PREFIX}user:{user}", f"{PREFIX}addr:{address}"


class SignIn(auth_views.LoginView):
    template_name = "frontend/login.html"
    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args, **kwargs) -> HttpResponse:
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
