"""Engine metrics: what each node's scraper (workers.scaling.scraper) keeps in Redis, read back for
the API and the console, and the Prometheus service-discovery targets of the engines themselves.
No models: the samples live in Redis only (contracts.engine_load)."""
