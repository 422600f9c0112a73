"""onemac-gateway: an OpenAI-compatible local LLM gateway."""

__version__ = "0.1.0"  # as in pyproject.toml (also the OpenAPI document's version)
