"""The OpenAI-upstream backend: a tier served by another OpenAI-compatible server over HTTP.

How a user who outgrows one Mac keeps the same gateway: a tier can point at vLLM, an exo
cluster, ``mlx_lm.server`` (sharded over Macs with ``mlx.launch``), llama.cpp's server or
Ollama. The upstream renders its own prompt and owns its cache and concurrency, so requests
are passed through as OpenAI chat completions, always streamed upstream (one code path,
and the client's disconnect closes the upstream stream at once). ``same_machine`` makes a
request hold this Mac's inference slot while it runs, since it computes here.

Errors become ours: the upstream's 4xx is passed through with its message, any other bad
answer is a 502, a timeout a 504; an upstream that dies mid-stream raises inside the stream
(the route turns that into an error event), never a hang.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import httpx
from httpx_sse import EventSource

from gateway.errors import UpstreamError, UpstreamRejectedError, UpstreamTimeoutError
from gateway.metrics import UpstreamMetrics
from gateway.scheduler.jobs import JobKind
from gateway.scheduler.lease import SlotLease
from gateway.scheduler.slot import Scheduler
from gateway.seam.backend import (
    BackendEvent,
    BackendHealth,
    BackendInfo,
    Capabilities,
    Embedder,
    Finished,
    FinishReason,
    GenerationRequest,
    ModelLimits,
    Prompt,
    Started,
    TextPrompt,
    TokenEvent,
    Warmer,
)
from gateway.seam.request_parts import ChatMessage, ToolSpec

log = logging.getLogger(__name__)
HEALTH_TIMEOUT_SECONDS = 1.0
MAX_ECHOED_ERROR_CHARS = 500


@dataclass(frozen=True)
class UpstreamConfig:
    base_url: str  # e.g. http://127.0.0.1:8080/v1
    model: str  # the upstream's model name
    api_key: str | None = None
    same_machine: bool = True
    connect_timeout: float = 5.0
    read_timeout: float = 120.0
    context_length: int | None = None


def is_loopback_url(url: str) -> bool:
    host = urlparse(url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


class OpenAIUpstreamBackend:
    """One tier of kind ``openai``: no warmer, no embedder (its model is not this Mac's)."""

    def __init__(
        self,
        tier: str,
        config: UpstreamConfig,
        metrics: UpstreamMetrics,
        scheduler: Scheduler | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.tier = tier
        self.config = config
        self.metrics = metrics
        # Only an upstream on this Mac competes for its memory bandwidth.
        self.scheduler = scheduler if config.same_machine else None
        capabilities = Capabilities(local_slot=self.scheduler is not None, text_prompts=True)
        self.info = BackendInfo("openai", tier, config.model, capabilities)
        headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = httpx.AsyncClient(
            base_url=config.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(
                connect=config.connect_timeout,
                read=config.read_timeout,
                write=config.read_timeout,
                pool=config.connect_timeout,
            ),
            transport=transport,
        )
        self._streams: dict[str, httpx.Response] = {}

    def limits(self) -> ModelLimits:
        return ModelLimits(context_length=self.config.context_length)

    def warmer(self) -> Warmer | None:
        return None

    def embedder(self) -> Embedder | None:
        return None

    async def render(
        self,
        messages: Sequence[ChatMessage],
        tools: Sequence[ToolSpec] = (),
        thinking: bool | None = None,
    ) -> Prompt:
        return Prompt()  # the upstream renders its own prompt (and has its own switches)

    async def render_text(self, prompt: TextPrompt) -> Prompt:
        return Prompt()

    def _body(self, request: GenerationRequest) -> dict[str, Any]:
        params = request.params
        body: dict[str, Any] = {"model": self.config.model}
        if request.text_prompt is not None:
            body["prompt"] = request.text_prompt.text
        else:
            body["messages"] = list(request.messages)
        body |= {
            "stream": True,
            "stream_options": {"include_usage": True},
            "temperature": params.temperature,
            "top_p": params.top_p,
        }
        if params.max_tokens is not None:
            body["max_tokens"] = params.max_tokens
        if params.seed is not None:
            body["seed"] = params.seed
        if params.stop:
            body["stop"] = list(params.stop)
        if params.presence_penalty:
            body["presence_penalty"] = params.presence_penalty
        if params.frequency_penalty:
            body["frequency_penalty"] = params.frequency_penalty
        if params.repetition_penalty is not None:  # vLLM's and mlx_lm.server's extension
            body["repetition_penalty"] = params.repetition_penalty
        if params.logit_bias:
            body["logit_bias"] = {str(k): v for k, v in params.logit_bias.items()}
        return body

    async def generate(self, request: GenerationRequest) -> AsyncGenerator[BackendEvent, None]:
        lease = (
            SlotLease(self.scheduler, request.priority, JobKind.UPSTREAM)
            if self.scheduler is not None
            else contextlib.nullcontext()
        )
        async with lease:
            try:
                endpoint = "completions" if request.text_prompt else "chat/completions"
                async with self._client.stream(
                    "POST", endpoint, json=self._body(request)
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise self._refusal(response)
                    self._streams[request.id] = response
                    yield Started(prompt_tokens=None)
                    async for event in self._relay(response):
                        yield event
            except httpx.TimeoutException as exc:
                self._count_error("timeout")
                raise UpstreamTimeoutError(
                    f"the upstream of tier {self.tier!r} did not answer in time ({exc!r})"
                ) from exc
            except httpx.TransportError as exc:
                self._count_error("transport")
                raise UpstreamError(
                    f"the upstream of tier {self.tier!r} failed: {exc or type(exc).__name__}"
                ) from exc
            finally:
                self._streams.pop(request.id, None)

    async def _relay(self, response: httpx.Response) -> AsyncIterator[BackendEvent]:
        finish: FinishReason | None = None
        usage: dict[str, Any] | None = None
        chunks = 0
        async for sse in EventSource(response).aiter_sse():
            if sse.data.strip() == "[DONE]":
                break
            try:
                chunk = json.loads(sse.data)
            except ValueError:
                self._count_error("bad_answer")
                raise UpstreamError(
                    f"the upstream of tier {self.tier!r} sent a malformed event"
                ) from None
            if not isinstance(chunk, dict):
                continue
            if chunk.get("error"):
                self._count_error("stream_error")
                raise UpstreamError(
                    f"the upstream of tier {self.tier!r} failed mid-stream: {_message_of(chunk)}"
                )
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices") or ():
                delta = choice.get("delta") or {}
                # (A legacy completion's chunk carries "text" instead of a delta.)
                text = delta.get("content") or choice.get("text") or ""
                if text:
                    chunks += 1
                    yield TokenEvent(text)
                if choice.get("finish_reason"):
                    finish = "length" if choice["finish_reason"] == "length" else "stop"
        if finish is None:
            self._count_error("truncated")
            raise UpstreamError(f"the upstream of tier {self.tier!r} ended its stream early")
        usage = usage or {}
        details = usage.get("prompt_tokens_details") or {}
        yield Finished(
            reason=finish,
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or chunks),
            cached_tokens=int(details.get("cached_tokens") or 0),
        )

    def _refusal(self, response: httpx.Response) -> Exception:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = {"error": {"message": response.text}}
        message = _message_of(body)
        if 400 <= status < 500 and status not in (401, 403, 408):
            error = body.get("error") if isinstance(body.get("error"), dict) else {}
            return UpstreamRejectedError(
                f"upstream: {message}",
                status_code=status,
                error_type=error.get("type") if isinstance(error.get("type"), str) else None,
                param=error.get("param") if isinstance(error.get("param"), str) else None,
                code=error.get("code") if isinstance(error.get("code"), str) else None,
            )
        self._count_error(f"http_{status}")
        if status == 408:
            return UpstreamTimeoutError(f"the upstream of tier {self.tier!r} timed out")
        # 401/403: the gateway's upstream key is wrong, not the client's: a bad gateway.
        return UpstreamError(f"the upstream of tier {self.tier!r} answered {status}: {message}")

    def _count_error(self, kind: str) -> None:
        self.metrics.upstream_errors.labels(self.tier, kind).inc()

    async def abort(self, request_id: str) -> bool:
        response = self._streams.pop(request_id, None)
        if response is None:
            return False
        await response.aclose()
        return True

    async def health(self) -> BackendHealth:
        try:
            response = await self._client.get("models", timeout=HEALTH_TIMEOUT_SECONDS)
            reachable = response.status_code == 200
            detail = None if reachable else f"GET /models answered {response.status_code}"
        except httpx.HTTPError as exc:
            reachable, detail = False, f"{type(exc).__name__}: {exc}"
        return BackendHealth(
            kind=self.info.kind,
            model=self.info.model_id,
            loaded=reachable,
            state="reachable" if reachable else "unreachable",
            detail=detail,
        )

    async def close(self) -> None:
        await self._client.aclose()


def _message_of(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        message = str(error.get("message") or error)
    elif error is not None:
        message = str(error)
    else:
        message = json.dumps(body)
    return message[:MAX_ECHOED_ERROR_CHARS]
