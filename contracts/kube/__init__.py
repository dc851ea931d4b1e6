"""What a service becomes on Kubernetes: names, labels and manifests, pure functions of the
spec (the Kubernetes runtime, workers.kube, applies them; the API renders them to refuse a
spec the cluster cannot run)."""
