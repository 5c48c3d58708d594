"""The engine's errors with the field names of a front's request, where the front names the engine's fields otherwise
(the NIM's `smi` for `smiles`, the native /generate's `optimize.particles` for `particles`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from bionemo_serving.errors import ServiceError

T = TypeVar("T")


def field_renamer(names: dict[str, str]) -> Callable[[str], str]:
    """A field the engine names (`smiles[2]`) as the front's request names it (`sequences[2]`): its head renamed,
    any index kept."""

    def rename(field: str) -> str:
        head, bracket, rest = field.partition("[")
        return names.get(head, head) + bracket + rest

    return rename


async def named(call: Awaitable[T], names: dict[str, str]) -> T:
    """`call`'s result; its errors with the front's field names."""
    try:
        return await call
    except ServiceError as error:
        raise error.renamed(field_renamer(names)) from None
