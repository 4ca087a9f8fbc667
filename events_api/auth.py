"""Who is calling: the platform admin or one tenant's API key, and what it may do.

Keys look like `evk_<id>_<secret>`: the prefix is for secret scanners, the id finds the stored row
and the secret is compared as a SHA-256 hash in constant time. Only the hash is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from dataclasses import dataclass
from enum import StrEnum

from events_api.ids import KEY_PREFIX, RandomBytes, new_key_id

KEY_TOKEN_PREFIX = "evk_"  # noqa: S105 - a public prefix, not a secret


class Scope(StrEnum):
    EVENTS_PUBLISH = "events:publish"
    EVENTS_READ = "events:read"
    SCHEMAS_WRITE = "schemas:write"
    DEAD_LETTERS_MANAGE = "dead-letters:manage"


@dataclass(frozen=True, slots=True)
class PlatformAdmin:
    """The holder of EVENTS_API_ADMIN_TOKEN."""

    actor = "admin"  # how the audit log names this caller


@dataclass(frozen=True, slots=True)
class TenantCaller:
    """A valid, unrevoked tenant API key."""

    tenant_id: str
    key_id: str
    scopes: frozenset[str]

    @property
    def actor(self) -> str:
        """How the audit log names this caller: the key id (never the key)."""
        return self.key_id

    def has_any(self, scopes: tuple[Scope, ...]) -> bool:
        return not scopes or any(s in self.scopes for s in scopes)


Caller = PlatformAdmin | TenantCaller


@dataclass(frozen=True, slots=True)
class IssuedKey:
    key_id: str
    token: str
    secret_hash: bytes


def hash_secret(secret: str) -> bytes:
    return hashlib.sha256(secret.encode()).digest()


def issue_key(random: RandomBytes = os.urandom) -> IssuedKey:
    key_id = new_key_id(random)
    secret = secrets.token_hex(32) if random is os.urandom else random(32).hex()
    token = f"{KEY_TOKEN_PREFIX}{key_id.removeprefix(KEY_PREFIX)}_{secret}"
    return IssuedKey(key_id=key_id, token=token, secret_hash=hash_secret(secret))


def parse_token(token: str) -> tuple[str, str] | None:
    """Split an API key into (key id, secret); None when it is not shaped like one of ours."""
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] + "_" != KEY_TOKEN_PREFIX or not parts[1] or len(parts[2]) != 64:
        return None
    return KEY_PREFIX + parts[1], parts[2]


def secret_matches(secret: str, stored_hash: bytes) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_hash)


def admin_token_matches(presented: str, admin_token: str | None) -> bool:
    if admin_token is None:
        return False
    return hmac.compare_digest(presented.encode(), admin_token.encode())


def bearer_token(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
