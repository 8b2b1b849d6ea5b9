"""Event History as the conversation wrote it: every payload and failure message decrypted.

    raw history (ciphertext) -> decoded_history(history, converter) -> plain payloads, messages

What the server stores is ciphertext (agent/codec.py). Readers of history (agent/history.py, the
tests, the benchmarks) decode it here first, through the same converter the Worker used, and then
read payloads with the plain payload converter as before. A key this process lacks fails here,
with a CodecError that names the key id (or dictionary), never with a half-read history.
"""

from __future__ import annotations

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.api.failure.v1 import Failure
from temporalio.client import WorkflowHistory
from temporalio.converter import DataConverter, PayloadCodec


async def decoded_history(history: WorkflowHistory, converter: DataConverter) -> WorkflowHistory:
    """A copy of `history` with the converter's codec undone everywhere in it."""
    codec = converter.payload_codec
    events = []
    for event in history.events:
        copy = type(event)()
        copy.CopyFrom(event)
        if codec is not None:
            await _decode(copy, codec, converter)
        events.append(copy)
    return WorkflowHistory(workflow_id=history.workflow_id, events=events)


async def _decode(message: Message, codec: PayloadCodec, converter: DataConverter) -> None:
    if isinstance(message, Payload):
        message.CopyFrom((await codec.decode([message]))[0])
        return
    for field, value in message.ListFields():
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        message_type = field.message_type
        assert message_type is not None  # a TYPE_MESSAGE field has one
        if message_type.GetOptions().map_entry:
            inner = message_type.fields_by_name["value"]
            children = list(value.values()) if inner.type == FieldDescriptor.TYPE_MESSAGE else []
        elif field.is_repeated:
            children = list(value)
        else:
            children = [value]
        for child in children:
            await _decode(child, codec, converter)
    if isinstance(message, Failure) and message.HasField("encoded_attributes"):
        # DefaultFailureConverterWithEncodedAttributes moved these into a payload (now decrypted).
        attributes = converter.payload_converter.from_payloads([message.encoded_attributes])[0]
        if isinstance(attributes, dict):
            message.message = str(attributes.get("message", ""))
            message.stack_trace = str(attributes.get("stack_trace", ""))
            message.ClearField("encoded_attributes")
