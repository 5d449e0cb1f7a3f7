"""Bearer API keys. Only SHA-256 digests travel to replicas; comparison is constant time; keys are never logged.

Keys come from an environment variable (`serve.api_keys_env`, read once when the app is built) and from a file
(`serve.api_keys_file`, one key per line or comma-separated: a mounted Kubernetes Secret, for example), which the
gateway reads again every `serve.api_keys_reload_s` seconds: a key added to the file works, and a key removed from
it stops working, within that interval and without a restart.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

from embedforge.serve.errors import APIError

log = logging.getLogger(__name__)


def _keys(raw: str) -> list[str]:
    return [k.strip() for line in raw.splitlines() for k in line.split(",") if k.strip()]


def digests_from_env(env_name: str | None) -> list[bytes]:
    """Digests of the comma-separated keys in `env_name`; no variable configured means no keys."""
    if env_name is None:
        return []
    raw = os.environ.get(env_name)
    if raw is None:
        raise ValueError(f"serve.api_keys_env names {env_name!r}, but that environment variable is not set")
    keys = _keys(raw)
    if not keys:
        raise ValueError(f"environment variable {env_name!r} holds no API keys")
    return [_digest(k) for k in keys]


def digests_from_file(path: str | Path) -> list[bytes]:
    """Digests of the keys in a file (one per line or comma-separated); a missing or empty file is an error."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ValueError(f"serve.api_keys_file {str(path)!r} cannot be read: {err.strerror or err}") from None
    keys = _keys(raw)
    if not keys:
        raise ValueError(f"serve.api_keys_file {str(path)!r} holds no API keys")
    return [_digest(k) for k in keys]


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeyChecker:
    """Checks `Authorization` headers against fixed digests plus, when given, digests that `reload()` returns,
    called again once `reload_s` seconds have passed. A reload that fails keeps the last keys it read and logs
    why (the endpoint neither opens nor locks everyone out because a rotation was half-written)."""

    def __init__(
        self,
        digests: list[bytes],
        reload: Callable[[], list[bytes]] | None = None,
        reload_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fixed = list(digests)
        self._reload, self._reload_s, self._clock = reload, reload_s, clock
        self._loaded: list[bytes] = reload() if reload is not None else []
        self._loaded_at = clock()

    @property
    def enabled(self) -> bool:
        return bool(self._fixed) or self._reload is not None

    def _digests(self) -> list[bytes]:
        if self._reload is not None and self._clock() - self._loaded_at >= self._reload_s:
            self._loaded_at = self._clock()
            try:
                self._loaded = self._reload()
            except ValueError as err:
                log.warning("API keys not reloaded, the previous ones stay: %s", err)
        return self._fixed + self._loaded

    def check(self, authorization: str | None) -> None:
        """Raise 401 unless the header is `Bearer <one of the keys>`; every key is compared, in constant time."""
        if not self.enabled:
            return
        if not authorization:
            raise APIError(401, "missing API key: send `Authorization: Bearer <key>`", code="invalid_api_key")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise APIError(401, "malformed Authorization header: expected `Bearer <key>`", code="invalid_api_key")
        given = _digest(token.strip())
        matched = False
        for digest in self._digests():
            matched |= hmac.compare_digest(given, digest)
        if not matched:
            raise APIError(401, "invalid API key", code="invalid_api_key")
