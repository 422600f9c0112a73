"""onemac-gateway: an OpenAI-compatible local LLM gateway."""

from importlib.metadata import PackageNotFoundError, version

try:  # pyproject.toml's, as installed (also the OpenAPI document's version)
    __version__ = version("onemac-gateway")
except PackageNotFoundError:  # a source tree on the path, not installed
    __version__ = "0.0.0+source"
