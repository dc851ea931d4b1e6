"""Wharf's data plane: an ASGI gateway that routes OpenAI/EAS requests to engine instances.

It reads routing only from the snapshot the control plane publishes to Redis
(contracts.routing) and never imports Django, so it can scale and restart on its own.
"""
