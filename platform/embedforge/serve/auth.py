"""Bearer API keys. Only SHA-256 digests travel to replicas; comparison is constant time; keys are never logged."""

from __future__ import annotations

import hashlib
import hmac
import os

from embedforge.serve.errors import APIError


def digests_from_env(env_name: str | None) -> list[bytes]:
    """Digests of the comma-separated keys in `env_name`; no variable configured means no keys (open endpoint)."""
    if env_name is None:
        return []
    raw = os.environ.get(env_name)
    if raw is None:
        raise ValueError(f"serve.api_keys_env names {env_name!r}, but that environment variable is not set")
    keys = [k.strip() for k in raw.split(",") if k.strip()]
    if not keys:
        raise ValueError(f"environment variable {env_name!r} holds no API keys")
    return [_digest(k) for k in keys]


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()


class KeyChecker:
    def __init__(self, digests: list[bytes]) -> None:
        self._digests = list(digests)

    @property
    def enabled(self) -> bool:
        return bool(self._digests)

    def check(self, authorization: str | None) -> None:
        """Raise 401 unless the header is `Bearer <one of the keys>`; every key is compared, in constant time."""
        if not self._digests:
            return
        if not authorization:
            raise APIError(401, "missing API key: send `Authorization: Bearer <key>`", code="invalid_api_key")
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise APIError(401, "malformed Authorization header: expected `Bearer <key>`", code="invalid_api_key")
        given = _digest(token.strip())
        matched = False
        for digest in self._digests:
            matched |= hmac.compare_digest(given, digest)
        if not matched:
            raise APIError(401, "invalid API key", code="invalid_api_key")
