"""'Did you mean' for a mistyped name (a stack, a model, a format, a view): the closest
choices by difflib's ratio, so a one-letter slip answers with the word meant."""

from __future__ import annotations

import difflib
from typing import Iterable


def close_to(word: str, choices: Iterable[str], n: int = 2, cutoff: float = 0.6) -> list[str]:
    """The choices within cutoff of word, closest first."""
    return difflib.get_close_matches(word, list(choices), n=n, cutoff=cutoff)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'did you mean X?' (or 'X or Y?'), or '' when nothing is close."""
    near = close_to(word, choices)
    return f"did you mean {' or '.join(near)}?" if near else ""


def hint_with(word: str, choices: Iterable[str], hint: str) -> str:
    """hint, led by a 'did you mean' when one of choices is close to word."""
    near = did_you_mean(word, choices)
    return f"{near} {hint}" if near else hint
