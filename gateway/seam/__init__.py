"""The request-level seam: what passes between the services and a tier's engine.

``backend.py`` is the interface every tier implements (``Backend``: a request in, typed
events out, abort, health, capabilities) with the request, its events and ``Priority``;
``request_parts.py``, ``grammar.py``, ``tool_format.py`` and ``reasoning.py`` describe a
request's parts and what its reply looks like (tool calls, a reasoning section, an output
grammar). It sits below both the scheduler (which queues by ``Priority``) and the engines
(whose local backend runs on the scheduler), so neither imports the other's way round;
like the engines it knows nothing of HTTP, pydantic or MLX.
"""
