"""What the control plane, the workers and the gateway agree on, below all three; no Django.

The service spec (its pydantic models, the source of truth for the API schema, the console
and the CLI) and the facts derived from it; the engine adapters that render a spec into a
command line (pure: the API previews and validates with them, the workers start with them);
and the shapes and Redis layouts the planes exchange: token digests, the routing snapshot,
usage counts, requests in flight, reconcile asks and log requests. Where a module talks to
Redis, the caller hands it the client. `lint-imports` (make lint) keeps the layers.
"""
