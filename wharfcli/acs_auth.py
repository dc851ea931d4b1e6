"""eascmd's requests signed with a Wharf access key pair, as Alibaba's older ROA signature
signs (what Wharf's API checks: controlplane.eas_api.signature_roa), so that `eascmd config
-i AccessKeyId -k AccessKeySecret` works as it does against EAS:

    Authorization: acs <AccessKeyId>:<base64 HMAC-SHA1(secret, string to sign)>
    string to sign: METHOD \\n Accept \\n Content-MD5 \\n Content-Type \\n Date \\n
                    "x-acs-name:value\\n" for each x-acs- header, sorted
                    path[?key=value&…] (the query sorted, path segments percent-encoded)

Content-MD5 is always sent, so the body is covered too. (wharfcli is installed without the
control plane, so this side of the scheme is written here.)
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Generator
from email.utils import formatdate
from urllib.parse import parse_qsl, quote

import httpx

SCHEME = "acs"


def string_to_sign(method: str, path: str, query: str, headers: httpx.Headers) -> str:
    fixed = [headers.get(name, "") for name in ("accept", "content-md5", "content-type", "date")]
    acs = "".join(f"{k}:{v}\n" for k, v in sorted(headers.items()) if k.startswith("x-acs-"))
    resource = "/".join(quote(segment, safe="~") for segment in path.split("/")) or "/"
    pairs = sorted(parse_qsl(query, keep_blank_values=True))
    if pairs:
        resource += "?" + "&".join(f"{k}={v}" if v else k for k, v in pairs)
    return "\n".join([method, *fixed]) + "\n" + acs + resource


class AccessKeyAuth(httpx.Auth):
    requires_request_body = True

    def __init__(self, key_id: str, secret: str) -> None:
        self.key_id, self._secret = key_id, secret

    def __repr__(self) -> str:  # the secret never in a repr
        return f"AccessKeyAuth({self.key_id!r})"

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        body = request.content
        request.headers["Accept"] = request.headers.get("Accept", "application/json")
        request.headers["Date"] = formatdate(usegmt=True)
        request.headers["Content-MD5"] = base64.b64encode(hashlib.md5(body).digest()).decode()  # noqa: S324 (the scheme's)
        request.headers["x-acs-signature-nonce"] = secrets.token_hex(16)
        path = request.url.path
        to_sign = string_to_sign(request.method, path, request.url.query.decode(), request.headers)
        digest = hmac.new(self._secret.encode(), to_sign.encode(), hashlib.sha1).digest()
        request.headers["Authorization"] = (
            f"{SCHEME} {self.key_id}:{base64.b64encode(digest).decode()}"
        )
        yield request
