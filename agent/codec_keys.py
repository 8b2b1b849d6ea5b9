"""Which codec keys this process holds: CODEC_KEYS, or else the key generated in the data directory.

    settings -> codec_keys(settings) -> [CodecKey, ...] (the first encrypts) -> temporal_client

`refund-bot run` and `refund-bot demo` call `ensure_codec_key` first: with no key configured they
generate one into DATA_DIR/codec.key (mode 0600, never overwritten), so every process on that data
directory (the Worker child inherits DATA_DIR) reads the same key. Past one host every process
needs the same keys, so they are set as CODEC_KEYS instead. When CODEC_KEYS is set it is the whole
keyring: the file is not read.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from agent.codec import CodecKey, CodecKeyError, parse_keys
from agent.settings import AgentSettings

KEY_FILENAME = "codec.key"


def key_file(data_dir: Path) -> Path:
    return Path(data_dir) / KEY_FILENAME


def codec_keys(settings: AgentSettings) -> list[CodecKey]:
    """The configured keys, the encrypting one first; empty when there are none."""
    if settings.codec_keys is not None:
        return parse_keys(settings.codec_keys.get_secret_value())
    path = key_file(settings.data_dir)
    if not path.exists():
        return []
    try:
        return parse_keys(path.read_text(), source=str(path))
    except ValueError as err:  # a damaged key file: one line, never the key
        raise CodecKeyError(str(err)) from None


def ensure_codec_key(settings: AgentSettings) -> tuple[list[CodecKey], CodecKey | None]:
    """The configured keys, generating one into the data directory when there are none.

    Returns the keys and the key generated just now (None when one was already there).
    """
    keys = codec_keys(settings)
    if keys:
        return keys, None
    path = key_file(settings.data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    key = CodecKey.generate(f"local-{secrets.token_hex(4)}")
    try:
        # O_EXCL: a key that exists is never overwritten, even by a process racing this one.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return codec_keys(settings), None
    with os.fdopen(fd, "w") as file:
        file.write(key.entry() + "\n")
    return [key], key
