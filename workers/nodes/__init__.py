"""Each host as a node of the fleet, and what its worker does there: the node's Node row and
heartbeat (`node`), its cards (`devices`), the agent that acts on the instances placed on it
(`agent`), starting one (`starter`), health checks (`probes`, `health`), warm-up before routing
(`warmup`), jobs run to their end (`jobs`), reading an instance's log and a service's tokenizer
for the API (`node_logs`, `node_tokenizer`), and the Ascend rank-table wait a Kubernetes pod's
init container runs (`rank_tables`)."""
