"""The limits at the gateway: rate, token, concurrency, queue and worker-slot limits, counted
atomically in Redis across gateways (`admission`, with its Lua `scripts` sent over the lean
`pipelined` connection), their rules without I/O (`rules`), the same algorithms in this
process alone while Redis is down (`local`), and waiting for a worker slot (`slot_waits`)."""
