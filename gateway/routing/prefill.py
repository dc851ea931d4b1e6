"""The prefill leg of a prefill/decode service's request (gateway.routing.pd has its bodies).

Its answer (one token, and the connector's transfer parameters) is read whole, up to the
gateway's cap (WHARF_GATEWAY_MAX_PREFILL_ANSWER_BYTES), and never relayed: only decode's
answer reaches the client, so usage is counted once.
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import Response

from gateway import errors
from gateway.observe import metrics
from gateway.plane import Call, Plane
from gateway.relay.upstream import AnswerTooLargeError, UpstreamBrokenError, UpstreamError
from gateway.routing.pd import PrefillLeg, prefill_body, with_transfer_params


async def run_prefill(plane: Plane, call: Call, leg: PrefillLeg) -> bytes | Response:
    """Run the prefill leg: the body for decode, or the error to answer with.

    When prefill cannot serve, `on_prefill_failure: decode_only` lets decode do the whole
    request (slower, but answered).
    """
    name = call.service.name
    fallback = leg.pd.on_prefill_failure == "decode_only"
    ranked = plane.balancer.ranked(
        f"{name}/prefill", leg.instances, policy=leg.pd.prefill_policy, key=call.routing_key
    )
    if not ranked:
        return call.body if fallback else errors.no_prefill_instance(name)
    instance = ranked[0]
    headers = [(n, v) for n, v in call.headers if n.lower() != "content-type"]
    headers += [("content-type", "application/json"), plane.engine_keys.authorization(instance)]
    body = json.dumps(prefill_body(leg.data, leg.pd)).encode()
    plane.balancer.acquire(instance.url)
    try:
        answer = await plane.upstream.request(
            instance.url, "POST", call.target, headers, body, call.timeout
        )
        try:
            if answer.status != 200:
                raise UpstreamBrokenError(f"prefill answered {answer.status}")
            result: Any = json.loads(await answer.read(plane.caps.prefill_answer))
        finally:
            answer.release()
    except AnswerTooLargeError as exc:
        plane.instance_failed(name, instance, metrics.UPSTREAM_TOO_LARGE, exc)
        return call.body if fallback else errors.prefill_answer_too_large(name, exc.limit)
    except (UpstreamError, ValueError) as exc:
        plane.instance_failed(name, instance, metrics.UPSTREAM_CONNECT, exc)
        return call.body if fallback else errors.prefill_failed(name)
    finally:
        plane.balancer.release(instance.url)
    if isinstance(result, dict):
        return with_transfer_params(call.body, leg.pd, result)
    return call.body
