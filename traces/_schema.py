"""Field types shared by the readers' msgspec schemas: the checks live in the types."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from traces._blocks import LOCAL_LIMIT
from traces.model import MAX_TOKENS

Tokens = Annotated[int, Meta(ge=0, le=MAX_TOKENS)]
Seconds = Annotated[float, Meta(ge=0.0, le=1e9)]
BlockSize = Annotated[int, Meta(gt=0, le=1 << 20)]
LocalBlockId = Annotated[int, Meta(ge=0, lt=LOCAL_LIMIT)]
NonEmpty = Annotated[str, Meta(min_length=1)]
