"""Async services' queues at the gateway (contracts.spec_queue): the control plane stores the
items (controlplane.queues); a gateway authenticates and limits callers, relays EAS's queue API
to the store (`relay`), holds WebSocket subscribers (`socket`), and feeds the instances of every
Async service it routes (`feeder`), talking to the store over `plane_client`."""
