"""Rows to frozen dataclasses: the columns a dataclass reads are its own field names.

A store function's ``SELECT`` names the columns of its dataclass's fields (the
``*_COLUMNS`` constants), so one mapping serves every entity: ``from_row`` takes
each field from the row's column of the same name, and the caller passes only
the fields whose column value needs converting (an array to a tuple, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

__all__ = ["column_list", "field_names", "from_row"]

T = TypeVar("T")


_FIELD_NAMES: dict[type[Any], tuple[str, ...]] = {}


def field_names(cls: type[Any]) -> tuple[str, ...]:
    """The field names of dataclass ``cls``, in declaration order (read once per class)."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = tuple(f.name for f in fields(cls))
    return names


def column_list(cls: type[Any]) -> str:
    """``cls``'s field names as a ``SELECT`` list (``"id, resource_id, ..."``)."""
    return ", ".join(field_names(cls))


def from_row(cls: type[T], row: Mapping[str, Any], /, **converted: Any) -> T:
    """``cls`` from ``row``: each field from the column of its name, except the
    ``converted`` ones, given as they are. A field with neither is a ``KeyError``."""
    values = {name: row[name] for name in field_names(cls) if name not in converted}
    return cls(**values, **converted)
