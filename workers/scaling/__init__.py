"""Autoscaling and what it reads: the pure decision (`autoscaler`), the loop that reads the
gateways' and nodes' figures and writes each role's count (`autoscaling`), and the node's own
samplers: its engines' metrics (`scraper`, which the gateways' routing reads too) and its
instances' CPU and card use (`usage_sampler`)."""
