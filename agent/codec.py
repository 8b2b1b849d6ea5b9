"""The payload codec: compressed, then AES-256-GCM, so what Temporal stores is small ciphertext.

    value -> payload -> encode: deflate (preset dictionary), seal (first key) -> Event History
                     -> decode: open (the key it names), inflate (the dictionary it names) -> value

Every payload the bot, the Worker and the commands send is encrypted before it leaves the process.
Each names its key id, so keys rotate by adding a new first key; a payload written before the
codec was on decodes as it is, so conversations running at deploy time carry on. Why compression
comes first, and what a payload's length can say, is in docs/encryption.md.
"""

from __future__ import annotations

import base64
import binascii
import functools
import os
import re
import secrets
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from agent.codec_dictionary import LATEST, NAMES, dictionary

ENCODING = b"binary/encrypted"
KEY_ID_METADATA = "encryption-key-id"
COMPRESSION_METADATA = "compression"  # the preset dictionary's name; absent: not compressed
KEY_BYTES = 32  # AES-256
NONCE_BYTES = 12
TAG_BYTES = 16  # AES-GCM's authentication tag, after the ciphertext
# Raw DEFLATE (no zlib header: the metadata already names the format), read with a 32 KiB window.
_WBITS = -15
# A payload inflating past this is refused: Temporal's own limit on one payload is 2 MB.
MAX_PAYLOAD_BYTES = 4 * 1024 * 1024
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class CodecError(Exception):
    """A payload this process cannot read, said in one line (never with a key in it)."""


class CodecKeyError(CodecError):
    """A key problem, said in one line that names the key id and never the key."""


class MissingCodecKey(CodecKeyError):
    def __init__(self, key_id: str, held: Sequence[str]) -> None:
        self.key_id = key_id
        super().__init__(
            f"Event History is encrypted with codec key {key_id!r}, which this process does not "
            f"have (it has {', '.join(repr(k) for k in held) or 'none'}): add that key to "
            "CODEC_KEYS, or use the DATA_DIR whose codec.key wrote it"
        )


class WrongCodecKey(CodecKeyError):
    def __init__(self, key_id: str) -> None:
        self.key_id = key_id
        super().__init__(
            f"codec key {key_id!r} does not decrypt this Event History: the key configured under "
            "that id is not the one that encrypted it"
        )


class UnknownDictionary(CodecError):
    def __init__(self, name: bytes) -> None:
        super().__init__(
            f"Event History is compressed with dictionary {name.decode(errors='replace')!r}, "
            f"which this refund-bot does not have (it has {', '.join(n.decode() for n in NAMES)})"
            ": run the version that wrote it, or a newer one"
        )


class UndecodablePayload(CodecError):
    """A payload that opened with its key but does not inflate."""


class TruncatedPayload(CodecError):
    """An encrypted payload too short to hold its nonce and tag: nothing this codec wrote."""

    def __init__(self, key_id: str, size: int) -> None:
        super().__init__(
            f"a payload encrypted with codec key {key_id!r} holds {size} bytes, fewer than its "
            f"nonce and tag ({NONCE_BYTES + TAG_BYTES}): it was cut short or never encrypted"
        )


class NoCodecKey(CodecKeyError):
    def __init__(self) -> None:
        super().__init__(
            "no codec key: set CODEC_KEYS (id:base64key), or start `refund-bot run` once to "
            "generate one into DATA_DIR; refund-bot writes nothing to Temporal unencrypted"
        )


@dataclass(frozen=True)
class CodecKey:
    key_id: str
    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if not _KEY_ID.match(self.key_id):
            raise ValueError(
                f"codec key id {self.key_id!r} must be 1-64 letters, digits, '.', '_' or '-'"
            )
        if len(self.secret) != KEY_BYTES:
            raise ValueError(f"codec key {self.key_id!r} must be {KEY_BYTES} bytes (AES-256)")

    @classmethod
    def generate(cls, key_id: str | None = None) -> CodecKey:
        return cls(key_id or f"key-{secrets.token_hex(4)}", os.urandom(KEY_BYTES))

    def entry(self) -> str:
        """The key as one CODEC_KEYS entry: `id:base64key`."""
        return f"{self.key_id}:{base64.b64encode(self.secret).decode()}"


def parse_keys(text: str, source: str = "CODEC_KEYS") -> list[CodecKey]:
    """`id:base64key,id:base64key` -> keys, the first one encrypting. Errors never quote a key."""
    keys: list[CodecKey] = []
    for number, entry in enumerate(filter(None, (e.strip() for e in text.split(","))), 1):
        key_id, sep, encoded = entry.partition(":")
        if not sep:
            raise ValueError(f"{source} entry {number} is not id:base64key")
        try:
            secret = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(
                f"{source} entry {number} ({key_id.strip()!r}): the key is not base64"
            ) from None
        keys.append(CodecKey(key_id.strip(), secret))
    ids = [k.key_id for k in keys]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{source} names one key id twice: each id must name one key")
    return keys


class AesGcmCodec(PayloadCodec):
    """Encrypts with the first key; decrypts with whichever key a payload names.

    Compression comes first because ciphertext does not compress; a conversation's payloads are
    small, so DEFLATE is primed with a preset dictionary of what they are made of
    (agent.codec_dictionary). A payload the dictionary does not help is sealed uncompressed."""

    def __init__(self, keys: Sequence[CodecKey]) -> None:
        self._encrypting = keys[0].key_id if keys else None
        self._secrets = {key.key_id: key.secret for key in keys}
        if len(self._secrets) != len(keys):
            raise ValueError("codec keys must have distinct ids")
        self._ciphers: dict[str, Any] = {}

    @property
    def key_ids(self) -> list[str]:
        return list(self._secrets)

    def _cipher(self, key_id: str) -> Any:
        # Built on first use, not with the codec or this module: the workflow sandbox re-imports
        # (and re-runs) what a workflow's module imports, and cryptography's native bindings
        # cannot be imported twice.
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if key_id not in self._ciphers:
            self._ciphers[key_id] = AESGCM(self._secrets[key_id])
        return self._ciphers[key_id]

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        if not payloads:
            return []
        if self._encrypting is None:
            raise NoCodecKey
        key_id = self._encrypting
        cipher = self._cipher(key_id)
        encoded = []
        for payload in payloads:
            metadata = {"encoding": ENCODING, KEY_ID_METADATA: key_id.encode()}
            plain = payload.SerializeToString()
            packed = _compress(plain, LATEST)
            if len(packed) < len(plain):
                plain = packed
                metadata[COMPRESSION_METADATA] = LATEST
            nonce = os.urandom(NONCE_BYTES)
            # The key id and the dictionary's name are authenticated data: a payload relabelled
            # with another key id, or with its compression added or removed, fails to open.
            sealed = cipher.encrypt(nonce, plain, _aad(metadata))
            encoded.append(Payload(metadata=metadata, data=nonce + sealed))
        return encoded

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [self._decrypt(payload) for payload in payloads]

    def _decrypt(self, payload: Payload) -> Payload:
        if payload.metadata.get("encoding") != ENCODING:
            return payload  # written before the codec was on (or never encoded): as it is
        key_id = payload.metadata.get(KEY_ID_METADATA, b"").decode(errors="replace")
        if key_id not in self._secrets:
            raise MissingCodecKey(key_id, self.key_ids)
        if len(payload.data) < NONCE_BYTES + TAG_BYTES:
            # AESGCM.decrypt raises ValueError on a nonce under 8 bytes, not InvalidTag.
            raise TruncatedPayload(key_id, len(payload.data))
        cipher = self._cipher(key_id)
        nonce, sealed = payload.data[:NONCE_BYTES], payload.data[NONCE_BYTES:]
        from cryptography.exceptions import InvalidTag  # imported late: see _cipher

        try:
            plain = cipher.decrypt(nonce, sealed, _aad(payload.metadata))
        except InvalidTag:
            raise WrongCodecKey(key_id) from None
        if COMPRESSION_METADATA in payload.metadata:
            plain = _decompress(plain, payload.metadata[COMPRESSION_METADATA])
        try:
            return Payload.FromString(plain)
        except DecodeError as err:  # authenticated, so written with this key: not by this codec
            raise UndecodablePayload(f"a payload sealed with {key_id!r} is not a Payload") from err


def _aad(metadata: Mapping[str, bytes]) -> bytes:
    # Without compression, exactly what payloads sealed before compression existed used.
    aad = metadata.get(KEY_ID_METADATA, b"")
    if COMPRESSION_METADATA in metadata:
        aad += b"\0" + metadata[COMPRESSION_METADATA]
    return aad


def _dictionary(name: bytes) -> bytes:
    try:
        return dictionary(name)
    except KeyError:
        raise UnknownDictionary(name) from None


@functools.cache
def _primed_compressor(name: bytes) -> Any:
    # Loading a dictionary into a compressor costs more than copying one that has it: load once
    # per process. An 8 KiB window holds the whole dictionary, and its state is small to copy
    # (the inflater reads any window up to 32 KiB, so this is not part of the format).
    return zlib.compressobj(wbits=-13, memLevel=5, zdict=_dictionary(name))


def _compress(data: bytes, name: bytes) -> bytes:
    packer = _primed_compressor(name).copy()
    return packer.compress(data) + packer.flush()


def _decompress(data: bytes, name: bytes) -> bytes:
    # The other way round: an inflater loads a dictionary faster than it copies its own window.
    unpacker = zlib.decompressobj(wbits=_WBITS, zdict=_dictionary(name))
    label = name.decode(errors="replace")
    try:
        plain = unpacker.decompress(data, MAX_PAYLOAD_BYTES)
    except zlib.error as err:
        raise UndecodablePayload(f"a payload compressed with {label!r} does not inflate") from err
    if not unpacker.eof or unpacker.unconsumed_tail:
        raise UndecodablePayload(
            f"a payload compressed with {label!r} is cut short or inflates past "
            f"{MAX_PAYLOAD_BYTES:,d} bytes"
        )
    return plain
