"""The Kubernetes runtime: services as Deployments on a cluster, pods observed as instances."""
