"""A tier served by MLX's own distributed engine (``kind = "mlx-distributed"``).

The gateway does not shard models itself: it starts ``mlx.launch`` (ring, JACCL over
Thunderbolt, or MPI) running ``mlx_lm.server`` on every host, pipeline- or tensor-parallel,
and relays requests to rank 0's HTTP server on 127.0.0.1 through the OpenAI-upstream backend.

- ``launch``: the cluster's description and the ``mlx.launch`` command line (pure).
- ``supervisor``: starts the launcher in its own process group, waits until rank 0 answers,
  restarts it when it dies (bounded, with backoff), stops it with the gateway.
- ``watchdog``: the group's leader; ends the group if the gateway itself dies.
- ``backend``: the tier's backend (the upstream backend, gated on the supervisor's state).
"""
