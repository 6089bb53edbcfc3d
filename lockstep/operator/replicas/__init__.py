"""Several operator replicas: who owns which resources and pods (ownership), who the replicas are
(membership), and reports passed on to their owner (relay)."""
