"""Request parameters shared by several routes."""

from __future__ import annotations

from typing import Annotated

from litestar.params import HeaderParameter

# (gateway extension) The priority class of a request, as a header: user | task | background.
PriorityHeader = Annotated[
    str | None,
    HeaderParameter(
        name="X-Gateway-Priority",
        required=False,
        description="(gateway extension) user | task | background",
    ),
]
