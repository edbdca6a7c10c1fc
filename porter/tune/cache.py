"""What a tune has measured, kept as it goes: one JSON file beside tune.json, rewritten
atomically after each measurement, so Ctrl-C (or a crash) loses nothing already measured and
a rerun with the same model, pair, recipes, versions and thread policy picks up where it was.
A key holds everything that changes the numbers; anything else is a fresh measurement."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from porter.core.atomic import atomic_write_text

CACHE_NAME = "tune-cache.json"


def key(**identity: Any) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True, default=str).encode()).hexdigest()[:16]


class TuneCache:
    def __init__(self, folder: Path, enabled: bool = True) -> None:
        self.path = Path(folder) / CACHE_NAME
        self.entries: dict[str, dict[str, Any]] = {}
        if enabled and self.path.is_file():
            try:
                raw = json.loads(self.path.read_text())
                self.entries = raw.get("entries", {}) if isinstance(raw, dict) else {}
            except (OSError, json.JSONDecodeError):
                self.entries = {}  # a damaged cache is measured again, never trusted

    def get(self, k: str) -> dict[str, Any] | None:
        return self.entries.get(k)

    def put(self, k: str, record: dict[str, Any]) -> None:
        self.entries[k] = record
        atomic_write_text(self.path, json.dumps({"format": "porter-tune-cache/1", "entries": self.entries},
                                                indent=1, default=str))


__all__ = ["CACHE_NAME", "TuneCache", "key"]
