"""Typed, checked access to one mapping of matrix.yml: each failure is a GpulabError naming where it happened."""

from __future__ import annotations

from typing import Any

from gpulab.compat import versions
from gpulab.errors import GpulabError


class Entry:
    """Typed access to one YAML mapping; every failure names where it happened."""

    def __init__(self, raw: Any, where: str) -> None:
        if not isinstance(raw, dict):
            raise GpulabError(f"matrix.yml: {where} must be a mapping, got {type(raw).__name__}.")
        self.raw, self.where = raw, where

    def _get(self, key: str, types: tuple[type, ...], optional: bool = False) -> Any:
        if key not in self.raw:
            raise GpulabError(f"matrix.yml: {self.where} is missing key {key!r}.")
        value = self.raw[key]
        if value is None and optional:
            return None
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise GpulabError(f"matrix.yml: {self.where}.{key} has the wrong type ({value!r}).")
        return value

    def text(self, key: str) -> str:
        value = self._get(key, (str,))
        if not value.strip():
            raise GpulabError(f"matrix.yml: {self.where}.{key} is empty.")
        return str(value)

    def opt_text(self, key: str) -> str | None:
        value = self._get(key, (str,), optional=True)
        return None if value is None else str(value)

    def num(self, key: str) -> float:
        return float(self._get(key, (int, float)))

    def opt_num(self, key: str) -> float | None:
        value = self._get(key, (int, float), optional=True)
        return None if value is None else float(value)

    def integer(self, key: str) -> int:
        return int(self._get(key, (int,)))

    def flag(self, key: str) -> bool:
        return bool(self._get(key, (bool,)))

    def opt_flag(self, key: str) -> bool:
        """An optional boolean key: absent means false."""
        return self.flag(key) if key in self.raw else False

    def opt_version(self, key: str) -> str | None:
        """An optional version key: absent or null means none."""
        if self.raw.get(key) is None:
            return None
        return self.version(key)

    def texts(self, key: str) -> tuple[str, ...]:
        value = self._get(key, (list,))
        if not all(isinstance(item, str) and item for item in value):
            raise GpulabError(f"matrix.yml: {self.where}.{key} must be a list of strings.")
        return tuple(value)

    def version(self, key: str) -> str:
        value = self.text(key)
        versions.parse(value, f"matrix.yml: {self.where}.{key}")
        return value

    def items(self, key: str) -> list[Any]:
        value = self._get(key, (list,))
        if not value:
            raise GpulabError(f"matrix.yml: {self.where}.{key} is empty.")
        return list(value)
