"""The services: every wire format's requests in the gateway's terms, run on a tier's
backend through the request-level seam, and their replies back in the format's own shapes.

Routes call these and nothing under them; nothing here knows HTTP or MLX. ``ChatService``
is the one path underneath every chat-like format (``OpenAIChat``, ``CompletionsService``,
``AnthropicMessages``, ``ResponsesService``, ``TaskService``); ``HintService`` pre-computes
while the user types; ``TierRegistry`` names the tiers and their backends.
"""

from gateway.serving.anthropic import AnthropicMessages
from gateway.serving.chat import ChatService
from gateway.serving.completions import CompletionsService
from gateway.serving.embeddings import EmbeddingsService
from gateway.serving.hints import HintService
from gateway.serving.openai_chat import OpenAIChat
from gateway.serving.response_store import ResponseStore
from gateway.serving.responses import ResponsesService
from gateway.serving.tasks import TaskService
from gateway.serving.tiers import Tier, TierRegistry

__all__ = [
    "AnthropicMessages",
    "ChatService",
    "CompletionsService",
    "EmbeddingsService",
    "HintService",
    "OpenAIChat",
    "ResponseStore",
    "ResponsesService",
    "TaskService",
    "Tier",
    "TierRegistry",
]
