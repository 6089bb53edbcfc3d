"""What ``lockstep demo`` runs besides Lockstep itself: a real control plane on loopback (control_plane.py) and
the kubelet's part (kubelet.py). Installed with the ``demo`` extra; the tests use the same modules."""
