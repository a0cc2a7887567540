"""Bearer tokens for callers on other machines (``colocate token create|list|revoke``).

A token is ``ID.SECRET``: ``ID`` (8 hex digits) finds its record, ``SECRET`` (32 random bytes, URL-safe) proves it.
Only a salted scrypt hash of the secret is stored, in ``STATE/tokens.json`` (0600, in the server's 0700
directory); the token itself is shown once, by ``token create``. A token names one user, may expire, and may be
revoked; a revoked or expired one is refused exactly like a wrong one (401), and the refusal is counted and
logged by its ID, never by its secret.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.errors import InputError
from common.names import is_safe_name

FILE = "tokens.json"
MAX_TOKENS = 10_000
UNVERIFIED = "a token not verified yet"  # check(may_hash=False): its secret needs the slow hash
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}  # ~20-50 ms a hash: a guess costs that much


def _hash(secret: str, salt: bytes) -> str:
    return hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT).hex()


@dataclass(frozen=True)
class TokenRecord:
    id: str
    user: str
    salt: str
    hash: str
    created: float
    expires: float | None
    revoked: bool = False

    def live(self, now: float) -> bool:
        return not self.revoked and (self.expires is None or now < self.expires)

    def shown(self) -> dict[str, Any]:
        """What ``token list`` shows: everything but the salt and hash."""
        return {"id": self.id, "user": self.user, "created": self.created, "expires": self.expires,
                "revoked": self.revoked}


def _record(raw: Any, source: Path) -> TokenRecord:
    fields = ("id", "user", "salt", "hash", "created", "expires", "revoked")
    if not isinstance(raw, dict) or set(raw) != set(fields):
        raise InputError("a token record of another layout", source=source, field="tokens",
                         valid=f"records with exactly {', '.join(fields)}")
    record = TokenRecord(**raw)
    if not (is_safe_name(record.user) and isinstance(record.id, str) and isinstance(record.hash, str)):
        raise InputError(f"a damaged token record ({str(record.id)[:16]!r})", source=source, field="tokens",
                         valid="the file colocate token create writes")
    return record


class TokenStore:
    """The tokens of one state directory; read at start, written atomically on every change."""

    def __init__(self, state_dir: Path) -> None:
        from common.safe_load import load_json

        self.path = Path(state_dir) / FILE
        self._records: dict[str, TokenRecord] = {}
        self._verified: dict[str, str] = {}  # sha256 of a token checked once -> its ID (scrypt once per token)
        if self.path.exists():
            data = load_json(self.path, field="tokens", what="token file")
            records = data.get("tokens") if isinstance(data, dict) else None
            if not isinstance(records, list):
                raise InputError("not a token file", source=self.path, field="tokens",
                                 valid="the file colocate token create writes (or none)")
            self._records = {r.id: r for r in (_record(raw, self.path) for raw in records)}

    def _save(self) -> None:
        from common.files import atomic_write_json

        atomic_write_json({"tokens": [asdict(r) for r in self._records.values()]}, self.path)
        os.chmod(self.path, 0o600)

    def create(self, user: str, expires_s: float | None) -> tuple[str, TokenRecord]:
        """A new token for ``user`` (valid ``expires_s`` seconds; None: until revoked): the token text, shown
        once, and its record."""
        if not is_safe_name(user):
            raise InputError(f"{user[:64]!r} is not a user name", field="USER", valid="a user of the server's machine")
        if len(self._records) >= MAX_TOKENS:
            raise InputError(f"{MAX_TOKENS} tokens exist", field="token", valid="revoke old tokens first")
        token_id = secrets.token_hex(4)
        while token_id in self._records:
            token_id = secrets.token_hex(4)
        secret, salt = secrets.token_urlsafe(32), secrets.token_bytes(16)
        now = time.time()
        record = TokenRecord(token_id, user, salt.hex(), _hash(secret, salt), now,
                             now + expires_s if expires_s is not None else None)
        self._records[token_id] = record
        self._save()
        return f"{token_id}.{secret}", record

    def revoke(self, token_id: str) -> TokenRecord:
        record = self._records.get(token_id)
        if record is None:
            raise InputError(f"no token {token_id[:16]!r}", field="ID", valid="an ID colocate token list shows")
        self._records[token_id] = revoked = TokenRecord(**{**asdict(record), "revoked": True})
        self._save()
        return revoked

    def records(self) -> list[TokenRecord]:
        return sorted(self._records.values(), key=lambda r: r.created)

    def check(self, token: str, *, may_hash: bool = True) -> tuple[TokenRecord | None, str]:
        """The live record ``token`` proves, or None and why not (never the secret: at most its ID). With
        ``may_hash=False`` a token not yet verified is not hashed (scrypt costs tens of milliseconds): the answer is
        then ``(None, UNVERIFIED)``, and the caller decides whether, and on which thread, to pay for the hash."""
        token_id, _, secret = token.partition(".")
        record = self._records.get(token_id) if len(token) <= 256 else None
        if record is None or not secret:
            return None, "unknown token"
        if not record.live(time.time()):
            return None, f"token {token_id} {'revoked' if record.revoked else 'expired'}"
        digest = hashlib.sha256(token.encode()).hexdigest()
        if self._verified.get(digest) != token_id:
            if not may_hash:
                return None, UNVERIFIED
            if not hmac.compare_digest(_hash(secret, bytes.fromhex(record.salt)), record.hash):
                return None, f"wrong secret for token {token_id}"
            self._verified[digest] = token_id
        return record, ""
