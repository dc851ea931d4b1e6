"""What the control plane and the gateway agree on, with no Django and no I/O.

The control plane writes; the gateway reads. Both import only from here, so the
shape of a token digest or of the routing snapshot is defined in one place.
"""
