"""What the gateway tells about its calls: Prometheus metrics and who may read them
(`metrics`, `metrics_access`), call figures and token usage added up in Redis (`figures`,
`usage`), requests in flight and requests/s for draining and the autoscaler (`inflight`,
`request_rates`), OpenTelemetry traces (`tracing`) and services' request logs (`request_log`)."""
