"""Node labels as file formats carry them, shared by :mod:`hmmmerge.environment` and
:mod:`hmmmerge.environment_files` (so that the file layer does not import the world it builds)."""

from __future__ import annotations

import ast

__all__ = ["NoStartWarning"]


class NoStartWarning(UserWarning):
    """An environment was built without a start: it starts at its first node."""


def _parse_label(text: str):
    """``"7"`` -> 7, ``"(5, 0)"`` / ``"5,0"`` -> ``(5, 0)``, ``"1.5"`` -> 1.5; ``None`` if not a number or tuple."""
    try:
        value = ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(value, list):
        value = tuple(value)
    if _is_plain_label(value):
        return value
    return None


def _is_plain_label(value) -> bool:
    """A number (not bool) or a tuple of them, the labels text conversion restores."""
    if isinstance(value, tuple):
        return all(_is_plain_label(v) for v in value)
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _to_label(value):
    """JSON lists back to tuples, recursively."""
    if isinstance(value, list):
        return tuple(_to_label(x) for x in value)
    return value
