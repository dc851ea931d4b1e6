"""The fleet simulator behind benchmarks/fleet_scale.py (issue 31): simulated nodes that
heartbeat and converge through the workers' own code with an in-memory runtime (`nodes`), the
control-plane processes they talk to (`stack`), what is watched while they run (`watch`), the
phases of one run (`phases`) and the arithmetic of the figures (`figures`)."""
