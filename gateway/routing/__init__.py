"""Routing at the gateway: which service and instance a call goes to. The routing snapshot
kept fresh from Redis (`snapshot`), the balancer's state and the policies that rank a
service's instances (`balancer`, `policies`, fed by `request_keys` and the engines' own
`engine_figures`), service groups, canary splits and mirroring (`groups`, `canary`, `mirror`),
prefill/decode services (`pd`, `prefill`), and holding a call until a service scaled to zero
has an instance (`activation`)."""
