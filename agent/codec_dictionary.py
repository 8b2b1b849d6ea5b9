"""The codec's compression dictionary: what a conversation's payloads are made of, said once.

    sample payloads (below) -> serialized as the SDK's JSON payloads -> DEFLATE's preset dictionary

A conversation's payloads are small (100-500 bytes of JSON each) and share most of their words:
field names, the agent's fixed sentences, ids of one shape. DEFLATE alone finds little to repeat
inside one small payload (a committed story's 20 encrypted payloads: 5,571 bytes, 3,995
compressed); with these samples as its preset dictionary, each payload refers back into them
(860 bytes). The codec compresses before it encrypts (agent.codec).

A dictionary is FROZEN once released. A payload names the dictionary it was compressed with
(`compression: deflate-1`), and decompresses only with exactly these bytes: editing a sample would
make every payload written with it unreadable. SHA256 pins the bytes, and `dictionary()` refuses
to hand out anything else. A better dictionary is a new entry (`deflate-2`) beside this one; the
codec then writes with the new one and still reads both.
"""

from __future__ import annotations

import functools
import hashlib

from temporalio.api.common.v1 import Payload

# The pydantic data converter's JSON payloads, one of each kind a conversation writes (inputs,
# Signals, Activity inputs and results, local activity results, the outcome), Slack, Discord and
# local. The values are examples; only their shape and the agent's own sentences matter.
_SAMPLES_1 = (
    '{"thread":{"platform":"slack","workspace":"T0123ABCD","channel":"C0SUPPORT","thread":'
    '"1733011200.000100"},"customer":{"platform":"slack","user_id":"U0CUSTOMER","display_name":'
    '"Nyghtowl"},"opening_message_id":"1733011200.000100","opening_text":"please refund order '
    '1234","hold_before_refund":false,"decider":"policy"}',
    '{"thread":{"platform":"discord","workspace":"1187000000000000000","channel":'
    '"1187000000000000001","thread":"1187000000000000002"},"customer":{"platform":"discord",'
    '"user_id":"1187000000000000003","display_name":"nyghtowl"},"opening_message_id":'
    '"1187000000000000004","opening_text":"I want my money back","hold_before_refund":true,'
    '"decider":"openai"}',
    '{"message_id":"local-3","author":{"platform":"local","user_id":"customer","display_name":'
    '"Nyghtowl"},"text":"Yes"}',
    '{"decision":"approve","actor":{"platform":"slack","user_id":"U0SUPPORT","display_name":'
    '"Sam (support)"},"click_id":"5dc4bdecc15942528a8ee6d3ce49e98f","round":1}',
    '{"decision":"deny","actor":{"platform":"local","user_id":"support","display_name":'
    '"Sam (support)"},"click_id":"282d0e97771b4e6e9c5a2a91119e3526","round":null}',
    '{"action":"ask","question_id":"order_number","question":"Which order would you like '
    'refunded? Please send the order number.","tool":null,"outcome":null,"rationale":"",'
    '"source":"policy"}',
    '{"action":"ask","question_id":"item_opened","question":"Was the package opened?","tool":null,'
    '"outcome":null,"rationale":"","source":"policy"}',
    '{"action":"ask","question_id":"damage","question":"What was damaged?","tool":null,'
    '"outcome":null,"rationale":"","source":"policy"}',
    '{"action":"lookup","question_id":null,"question":null,"tool":"lookup_customer_history",'
    '"outcome":null,"rationale":"","source":"policy"}',
    '{"action":"decide","question_id":null,"question":null,"tool":null,"outcome":"escalate",'
    '"rationale":"$450.00 is over the auto-approve limit and the customer has 1 prior refund.",'
    '"source":"openai"}',
    '{"kind":"check_refund_policy","policy":{"order_number":"4500","eligible":true,'
    '"return_required":true,"reason":"eligible: bought 9 days ago, within the refund window"}}',
    '{"kind":"lookup_order","order_number":"1234","order":{"order_number":"1234","item":'
    '"plush python","amount_cents":8000,"currency":"usd","status":"delivered","purchased_at":'
    '"2026-11-18","final_sale":false,"payment_ref":"pi_demo_1234","refunds":[]}}',
    '{"kind":"lookup_customer_history","history":{"customer_id":"cus_nyghtowl","display_name":'
    '"Nyghtowl","tenure_days":824,"orders":4,"prior_refunds":["2025-08-09, order 1001 (laptop '
    'stickers), $18.00, re_ledger_8ae1864925340d99a628"],"prior_refund_count":1,'
    '"refunded_orders":{"1001":{"refund_id":"re_ledger_8ae1864925340d99a628","payment_ref":'
    '"pi_demo_1001","amount_cents":1800,"status":"succeeded","refunded_on":"2025-08-09",'
    '"workflow_id":null}}}}',
    '{"allowed":true,"principal":{"platform":"agent","user_id":"refund-bot","display_name":'
    '"refund-bot"},"role":"refund_agent","reason":"refund-bot holds refund_agent (limit '
    '$100.00)","grant_id":1,"limit_cents":10000}',
    '{"allowed":false,"principal":{"platform":"local","user_id":"marlow","display_name":'
    '"Marlow"},"role":"refund_approver","reason":"Marlow holds no live refund_approver grant",'
    '"grant_id":null,"limit_cents":null}',
    '{"idempotency_key":"refund-bot-5315ea8228b0b64f4a74755ca92749948a469998","workflow_id":'
    '"slack-T0123ABCD-C0SUPPORT-1733011200.000100","order_number":"1234","payment_ref":'
    '"pi_3QK0000000000000000000","amount_cents":8000,"currency":"usd"}',
    '{"refund_id":"re_ledger_1176bbe71389a0ece0f2","status":"succeeded","amount_cents":8000,'
    '"idempotency_key":"refund-bot-5315ea8228b0b64f4a74755ca92749948a469998","mode":"stripe",'
    '"attempt":1,"earlier":null}',
    '{"platform_message_id":"local-2","duplicate":false,"message":{"thread":{"platform":"local",'
    '"workspace":"local","channel":"support","thread":"t1"},"key":{"workflow_id":'
    '"local-local-support-t1","run_id":"c79838c4-46a0-41e6-8af1-6508a3677f94","seq":1},"kind":'
    '"question","text":"Was the package opened?","actions":[],"round":null}}',
    '{"platform_message_id":"1733011201.000200","duplicate":false,"message":{"thread":'
    '{"platform":"slack","workspace":"T0123ABCD","channel":"C0SUPPORT","thread":'
    '"1733011200.000100"},"key":{"workflow_id":"slack-T0123ABCD-C0SUPPORT-1733011200.000100",'
    '"run_id":"830a70c6-125f-480d-af70-db1616367484","seq":3},"kind":"escalation","text":'
    '"This refund needs a support agent: order 4500 (espresso machine, $450.00). ","actions":'
    '["approve","deny"],"round":1}}',
    '{"platform_message_id":"local-6","duplicate":false,"message":{"thread":{"platform":"local",'
    '"workspace":"local","channel":"support","thread":"t1"},"key":{"workflow_id":'
    '"local-local-support-t1","run_id":"c79838c4-46a0-41e6-8af1-6508a3677f94","seq":3},"kind":'
    '"info","text":"Refund of $80.00 approved. Holding before the refund for the demo: a '
    'presenter releases it with /refund-release.","actions":[],"round":null}}',
    '{"thread":{"platform":"local","workspace":"local","channel":"support","thread":"t1"},"key":'
    '{"workflow_id":"local-local-support-t1","run_id":"c79838c4-46a0-41e6-8af1-6508a3677f94",'
    '"seq":4},"kind":"outcome","text":"Your refund is complete: $80.00 for order 1234 (plush '
    "python) is on its way back to your original payment method. Reference "
    're_ledger_1176bbe71389a0ece0f2.","actions":[],"round":null}',
    '{"status":"refunded","message":"Your refund is complete: $80.00 for order 1234 (plush '
    "python) is on its way back to your original payment method. Reference "
    're_ledger_1176bbe71389a0ece0f2.","refund":{"refund_id":"re_ledger_1176bbe71389a0ece0f2",'
    '"status":"succeeded","amount_cents":8000,"idempotency_key":'
    '"refund-bot-5315ea8228b0b64f4a74755ca92749948a469998","mode":"ledger","attempt":1,'
    '"earlier":null},"detail":null}',
    '{"status":"declined","message":"A support agent declined this refund.","refund":null,'
    '"detail":null}',
    '{"status":"failed","message":"I couldn\'t issue this refund; a support agent will follow '
    'up.","refund":null,"detail":"No such payment: pi_test_6060"}',
)


def _dictionary_bytes(samples: tuple[str, ...]) -> bytes:
    # Serialized as the SDK hands payloads to the codec: the metadata's bytes are in it too.
    return b"".join(
        Payload(metadata={"encoding": b"json/plain"}, data=s.encode()).SerializeToString()
        for s in samples
    )


# Dictionary name -> (its samples, the SHA-256 of its bytes). Never edit an entry: add one.
_DICTIONARIES = {
    b"deflate-1": (
        _SAMPLES_1,
        "12f14441580df787d65861208d65e738fd6ced3fd8c1119dff977dfc2d7faceb",
    ),
}
LATEST = b"deflate-1"
NAMES = tuple(_DICTIONARIES)


@functools.cache
def dictionary(name: bytes) -> bytes:
    """The preset dictionary called `name`, exactly as released; KeyError for a name unknown."""
    samples, sha256 = _DICTIONARIES[name]
    built = _dictionary_bytes(samples)
    if hashlib.sha256(built).hexdigest() != sha256:
        # A released dictionary must never change: payloads written with it would not decode.
        raise RuntimeError(f"codec dictionary {name.decode()!r} is not the one released")
    return built
