"""The payload codec and its keys, no server needed: encryption, rotation, refusals, key file."""

from __future__ import annotations

import base64
import hashlib
import stat
import subprocess
import sys

import pytest
from pydantic import SecretStr, ValidationError
from temporalio.api.common.v1 import Payload
from temporalio.contrib.pydantic import PydanticPayloadConverter, pydantic_data_converter
from temporalio.converter import CompositePayloadConverter

from agent import codec_dictionary
from agent.codec import (
    COMPRESSION_METADATA,
    ENCODING,
    KEY_ID_METADATA,
    MAX_PAYLOAD_BYTES,
    NONCE_BYTES,
    AesGcmCodec,
    CodecKey,
    CodecKeyError,
    MissingCodecKey,
    NoCodecKey,
    TruncatedPayload,
    UndecodablePayload,
    UnknownDictionary,
    WrongCodecKey,
    parse_keys,
)
from agent.codec_dictionary import LATEST, NAMES, dictionary
from agent.codec_keys import codec_keys, ensure_codec_key, key_file
from agent.models import Actor, CustomerMessage
from agent.settings import AgentSettings
from agent.temporal_client import data_converter

K1 = CodecKey("k1", b"1" * 32)
K2 = CodecKey("k2", b"2" * 32)
MESSAGE = CustomerMessage(
    message_id="m1",
    author=Actor(platform="local", user_id="customer", display_name="Nyghtowl"),
    text="the seam of my plush python split",
)


# Bytes no dictionary helps with (a hash chain), the same on every run.
NOISE = b"".join(hashlib.sha256(bytes([i])).digest() for i in range(32))


def plain(value: object) -> Payload:
    return pydantic_data_converter.payload_converter.to_payloads([value])[0]


async def test_a_payload_is_ciphertext_named_by_its_key_and_decodes_exactly() -> None:
    original = plain(MESSAGE)
    (sealed,) = await AesGcmCodec([K1]).encode([original])
    assert sealed.metadata["encoding"] == ENCODING
    assert sealed.metadata[KEY_ID_METADATA] == b"k1"
    assert b"plush python" not in sealed.SerializeToString()
    assert b"Nyghtowl" not in sealed.SerializeToString()
    assert b"plush python" in original.SerializeToString()  # the check above can fail
    assert await AesGcmCodec([K1]).decode([sealed]) == [original]
    # A fresh nonce each time: the same value never encrypts to the same bytes twice.
    (again,) = await AesGcmCodec([K1]).encode([original])
    assert again.data != sealed.data


async def test_rotation_new_key_encrypts_old_key_still_decrypts() -> None:
    (old,) = await AesGcmCodec([K1]).encode([plain(MESSAGE)])
    rotated = AesGcmCodec([K2, K1])
    (new,) = await rotated.encode([plain(MESSAGE)])
    assert new.metadata[KEY_ID_METADATA] == b"k2"
    assert await rotated.decode([old, new]) == [plain(MESSAGE), plain(MESSAGE)]


async def test_a_payload_written_before_the_codec_decodes_as_it_is() -> None:
    before = plain(MESSAGE)
    assert await AesGcmCodec([K1]).decode([before]) == [before]
    assert await AesGcmCodec([]).decode([before]) == [before]


async def test_a_missing_key_fails_naming_its_id_and_never_a_key() -> None:
    (sealed,) = await AesGcmCodec([K1]).encode([plain(MESSAGE)])
    with pytest.raises(MissingCodecKey) as missing:
        await AesGcmCodec([K2]).decode([sealed])
    line = str(missing.value)
    assert "'k1'" in line and "'k2'" in line and "CODEC_KEYS" in line
    assert "\n" not in line
    for key in (K1, K2):
        assert base64.b64encode(key.secret).decode() not in line


async def test_a_wrong_key_under_the_right_id_fails_clearly() -> None:
    (sealed,) = await AesGcmCodec([K1]).encode([plain(MESSAGE)])
    impostor = CodecKey("k1", b"x" * 32)
    with pytest.raises(WrongCodecKey, match="'k1' does not decrypt"):
        await AesGcmCodec([impostor]).decode([sealed])


async def test_a_relabelled_payload_does_not_decrypt() -> None:
    # The key id is authenticated: pointing a payload at another key fails, it does not decrypt.
    same_secret = CodecKey("k9", K1.secret)
    (sealed,) = await AesGcmCodec([K1]).encode([plain(MESSAGE)])
    sealed.metadata[KEY_ID_METADATA] = b"k9"
    with pytest.raises(WrongCodecKey):
        await AesGcmCodec([K1, same_secret]).decode([sealed])


async def test_a_payload_is_compressed_before_it_is_sealed_and_names_its_dictionary() -> None:
    original = plain(MESSAGE)
    (sealed,) = await AesGcmCodec([K1]).encode([original])
    assert sealed.metadata[COMPRESSION_METADATA] == LATEST
    overhead = NONCE_BYTES + 16  # the nonce and GCM's tag
    # The dictionary knows the field names and the payload's metadata: only the words are new.
    assert len(sealed.data) - overhead < len(original.SerializeToString()) / 2
    assert await AesGcmCodec([K1]).decode([sealed]) == [original]


async def test_a_payload_the_dictionary_does_not_help_is_sealed_as_it_is() -> None:
    noise = Payload(metadata={"encoding": b"binary/plain"}, data=NOISE)
    (sealed,) = await AesGcmCodec([K1]).encode([noise])
    assert COMPRESSION_METADATA not in sealed.metadata
    assert await AesGcmCodec([K1]).decode([sealed]) == [noise]


def _sealed_by_hand(plain_bytes: bytes, metadata: dict[str, bytes]) -> Payload:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    aad = metadata[KEY_ID_METADATA]
    if COMPRESSION_METADATA in metadata:
        aad += b"\0" + metadata[COMPRESSION_METADATA]
    nonce = b"n" * NONCE_BYTES
    return Payload(
        metadata=metadata, data=nonce + AESGCM(K1.secret).encrypt(nonce, plain_bytes, aad)
    )


async def test_a_payload_sealed_before_compression_still_decodes() -> None:
    # Exactly what the codec wrote before compression: no compression entry, the key id as AAD.
    original = plain(MESSAGE)
    before = _sealed_by_hand(
        original.SerializeToString(), {"encoding": ENCODING, KEY_ID_METADATA: b"k1"}
    )
    assert await AesGcmCodec([K1]).decode([before]) == [original]


async def test_adding_or_removing_the_compression_label_fails_to_open() -> None:
    (compressed,) = await AesGcmCodec([K1]).encode([plain(MESSAGE)])
    del compressed.metadata[COMPRESSION_METADATA]
    with pytest.raises(WrongCodecKey):
        await AesGcmCodec([K1]).decode([compressed])
    noise = Payload(metadata={"encoding": b"binary/plain"}, data=NOISE)
    (uncompressed,) = await AesGcmCodec([K1]).encode([noise])
    uncompressed.metadata[COMPRESSION_METADATA] = LATEST
    with pytest.raises(WrongCodecKey):
        await AesGcmCodec([K1]).decode([uncompressed])


async def test_a_dictionary_this_version_lacks_is_one_clear_line() -> None:
    newer = _sealed_by_hand(
        b"whatever deflate-9 made",
        {"encoding": ENCODING, KEY_ID_METADATA: b"k1", COMPRESSION_METADATA: b"deflate-9"},
    )
    with pytest.raises(UnknownDictionary) as unknown:
        await AesGcmCodec([K1]).decode([newer])
    line = str(unknown.value)
    assert "'deflate-9'" in line and "deflate-1" in line and "\n" not in line


async def test_a_payload_that_inflates_past_the_limit_is_refused() -> None:
    import zlib

    packer = zlib.compressobj(wbits=-15, zdict=dictionary(LATEST))
    bomb = packer.compress(b"\0" * (MAX_PAYLOAD_BYTES + 1)) + packer.flush()
    assert len(bomb) < 10_000  # the check below can fail: this is small and inflates past it
    sealed = _sealed_by_hand(
        bomb, {"encoding": ENCODING, KEY_ID_METADATA: b"k1", COMPRESSION_METADATA: LATEST}
    )
    with pytest.raises(UndecodablePayload, match="inflates past"):
        await AesGcmCodec([K1]).decode([sealed])


@pytest.mark.parametrize("size", [0, 1, 7, 8, NONCE_BYTES, NONCE_BYTES + 15])
async def test_an_encrypted_payload_too_short_for_its_nonce_and_tag_is_one_clear_line(
    size: int,
) -> None:
    """Reproduces AESGCM refusing a nonce under 8 bytes with a ValueError, not a CodecError:
    the codec server answered such a payload of a known key id with 500."""
    short = Payload(metadata={"encoding": ENCODING, KEY_ID_METADATA: b"k1"}, data=b"n" * size)
    with pytest.raises(TruncatedPayload) as truncated:
        await AesGcmCodec([K1]).decode([short])
    assert f"holds {size} bytes" in str(truncated.value) and "\n" not in str(truncated.value)


def test_every_released_dictionary_is_exactly_as_released(monkeypatch) -> None:
    # dictionary() checks each against the SHA-256 pinned at its release: an edited sample would
    # make every payload written with it unreadable, so it must fail here first.
    for name in NAMES:
        assert len(dictionary(name)) > 1000
    samples, sha256 = codec_dictionary._DICTIONARIES[LATEST]
    edited = (*samples[:-1], samples[-1].replace("follow up", "follow-up"))
    monkeypatch.setitem(codec_dictionary._DICTIONARIES, LATEST, (edited, sha256))
    dictionary.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="not the one released"):
            dictionary(LATEST)
    finally:
        dictionary.cache_clear()


async def test_without_a_key_nothing_is_written_in_clear() -> None:
    with pytest.raises(NoCodecKey, match="CODEC_KEYS"):
        await AesGcmCodec([]).encode([plain(MESSAGE)])
    assert await AesGcmCodec([]).encode([]) == []


async def test_the_data_converter_encrypts_values_and_failure_messages() -> None:
    from temporalio.api.failure.v1 import Failure
    from temporalio.exceptions import ApplicationError

    converter = data_converter([K1])
    (payload,) = await converter.encode([MESSAGE])
    assert payload.metadata[KEY_ID_METADATA] == b"k1"
    assert await converter.decode([payload], [CustomerMessage]) == [MESSAGE]

    failure = Failure()
    await converter.encode_failure(ApplicationError("customer said: plush python"), failure)
    assert failure.message == "Encoded failure"
    assert b"plush python" not in failure.SerializeToString()
    decoded = await converter.decode_failure(failure)
    assert (
        isinstance(decoded, ApplicationError) and decoded.message == "customer said: plush python"
    )


def test_every_payload_converter_shares_one_pydantic_json_converter_and_writes_as_the_sdks() -> (
    None
):
    # The SDK makes one for every conversation and two for every activation: each type's pydantic
    # TypeAdapter is built once in the process, not once in each (agent.temporal_client).
    made_class = data_converter([K1]).payload_converter_class
    first, second, sdks = made_class(), made_class(), PydanticPayloadConverter()
    assert isinstance(first, CompositePayloadConverter)
    assert isinstance(second, CompositePayloadConverter)
    assert first.converters[b"json/plain"] is second.converters[b"json/plain"]
    assert list(first.converters) == list(sdks.converters)
    for value in (MESSAGE, None, b"bytes", {"order": 1234}):
        (payload,) = first.to_payloads([value])
        assert payload == sdks.to_payloads([value])[0]
        assert second.from_payloads([payload], [type(value)]) == [value]


def test_keys_parse_in_order_and_errors_never_quote_a_key() -> None:
    assert parse_keys(f" {K2.entry()} , {K1.entry()} ") == [K2, K1]
    secret = base64.b64encode(b"s" * 32).decode()
    for text, expected in (
        (f"k1{secret}", "entry 1 is not id:base64key"),
        (f"{K1.entry()},k2:{secret}!!", "entry 2 ('k2'): the key is not base64"),
        (f"k1:{base64.b64encode(b'short').decode()}", "must be 32 bytes"),
        (f"{K1.entry()},{CodecKey('k1', b'z' * 32).entry()}", "names one key id twice"),
        (f"bad id:{secret}", "must be 1-64 letters"),
    ):
        with pytest.raises(ValueError, match=expected.replace("(", r"\(").replace(")", r"\)")) as e:
            parse_keys(text)
        assert secret not in str(e.value) and "c3Nzc3" not in str(e.value)


def test_malformed_codec_keys_are_refused_by_settings_without_echoing_them() -> None:
    # Each a str, as the environment gives it (the settings' __init__ is typed SecretStr).
    bad = "k1:" + base64.b64encode(b"tiny-secret-bytes").decode()
    with pytest.raises(ValidationError, match="must be 32 bytes") as err:
        AgentSettings(_env_file=None, CODEC_KEYS=bad)  # type: ignore[arg-type]
    assert bad.split(":")[1] not in str(err.value)
    with pytest.raises(ValidationError) as live:
        AgentSettings(
            _env_file=None,
            stripe_api_key="sk_live_do_not_echo",  # type: ignore[arg-type]
        )
    assert "sk_live_do_not_echo" not in str(live.value)
    ok = AgentSettings(_env_file=None, CODEC_KEYS=K1.entry())  # type: ignore[arg-type]
    assert K1.entry() not in repr(ok)


def test_the_key_is_generated_once_mode_0600_and_never_overwritten(tmp_path) -> None:
    settings = AgentSettings(_env_file=None, data_dir=tmp_path / "data")
    assert codec_keys(settings) == []
    keys, generated = ensure_codec_key(settings)
    assert generated is not None and keys == [generated]
    assert generated.key_id.startswith("local-")
    path = key_file(settings.data_dir)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    written = path.read_bytes()

    again, none = ensure_codec_key(settings)
    assert none is None and again == keys
    assert path.read_bytes() == written
    assert codec_keys(settings) == keys  # what every other process on this data directory reads


def test_codec_keys_setting_is_the_whole_keyring(tmp_path) -> None:
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)
    ensure_codec_key(settings)
    configured = settings.model_copy(update={"codec_keys": SecretStr(f"{K2.entry()},{K1.entry()}")})
    assert codec_keys(configured) == [K2, K1]
    assert ensure_codec_key(configured) == ([K2, K1], None)


def test_a_worker_without_a_key_refuses_to_start_in_one_line(tmp_path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "refund_bot", "worker"],
        env={"PATH": "/usr/bin:/bin", "DATA_DIR": str(tmp_path)},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().startswith("refund-bot: no codec key: set CODEC_KEYS")
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
    assert not key_file(tmp_path).exists()  # a Worker never makes up a key of its own


def test_a_damaged_key_file_is_one_clear_line(tmp_path) -> None:
    key_file(tmp_path).write_text("local-1:not base64 at all\n")
    settings = AgentSettings(_env_file=None, data_dir=tmp_path)
    with pytest.raises(CodecKeyError, match=r"codec\.key entry 1 \('local-1'\): the key is not"):
        codec_keys(settings)
