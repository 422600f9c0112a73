"""A base model's chat: a plain transcript, because it has no chat template of its own.

The model's turn ends where it starts writing the user's next line, so the gateway adds that
stop string (``TRANSCRIPT_STOP``) to every request to such a model.
"""

from __future__ import annotations

TRANSCRIPT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}User: {{ message['content'] }}\n"
    "{% else %}Assistant: {{ message['content'] }}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)
TRANSCRIPT_STOP = ("\nUser:",)
