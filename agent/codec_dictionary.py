"""The codec's compression dictionary: what a conversation's payloads are made of, said once.

    sample payloads (below) -> serialized as the SDK's JSON payloads -> DEFLATE's preset dictionary

A conversation's payloads are small (100-500 bytes of JSON each) and share most of their words:
field names, the agent's fixed sentences, ids of one shape. DEFLATE alone finds little to repeat
inside one small payload (a committed story's 20 encrypted payloads: 5,571 bytes, 3,995
compressed); with these samples as its preset dictionary, each payload refers back into them
(1,234 bytes; samples of exactly those payloads would give 860, which is why none of the
samples below is the demo's). The codec compresses before it encrypts (agent.codec).

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
# local. The values are invented, and none is the demo's or the benchmarks' (their customers,
# orders and amounts): what the dictionary may carry is the payloads' shape, the shape of their ids
# and the agent's own sentences, so a benchmark measures what any conversation gets.
_SAMPLES_1 = (
    '{"thread":{"platform":"slack","workspace":"T07QX2K4M","channel":"C07RB9Z1P","thread":'
    '"1732650011.392819"},"customer":{"platform":"slack","user_id":"U07S3PLM1","display_name":'
    '"Rin"},"opening_message_id":"1732650011.392819","opening_text":"hi, can I get a refund for '
    'order 7310?","hold_before_refund":false,"decider":"policy"}',
    '{"thread":{"platform":"discord","workspace":"1187352046612395018","channel":'
    '"1187352046612395021","thread":"1309971182734516305"},"customer":{"platform":"discord",'
    '"user_id":"843226519037313066","display_name":"rin"},"opening_message_id":'
    '"1309971182734516305","opening_text":"I want my money back","hold_before_refund":true,'
    '"decider":"openai"}',
    '{"message_id":"local-9","author":{"platform":"local","user_id":"ana","display_name":'
    '"Ana"},"text":"no"}',
    '{"decision":"approve","actor":{"platform":"slack","user_id":"U07T8QWE2","display_name":'
    '"Kai (support)"},"click_id":"0c5e2b9f6d1a47e3b8f4a2c9d7e6b1a0","round":1}',
    '{"decision":"deny","actor":{"platform":"local","user_id":"kai","display_name":"Kai"},'
    '"click_id":"9f1e8d7c6b5a4f3e2d1c0b9a8f7e6d5c","round":null}',
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
    '"rationale":"$212.40 is over the auto-approve limit and the customer has 3 prior refunds.",'
    '"source":"openai"}',
    '{"kind":"check_refund_policy","policy":{"order_number":"7310","eligible":false,'
    '"return_required":false,"reason":"not eligible: bought 41 days ago, outside the refund '
    'window"}}',
    '{"kind":"lookup_order","order_number":"7310","order":{"order_number":"7310","item":'
    '"wool scarf","amount_cents":3500,"currency":"eur","status":"shipped","purchased_at":'
    '"2026-10-02","final_sale":true,"payment_ref":"pi_3QzR8mLkP2vX9tY1a0b2c3d4","refunds":[]}}',
    '{"kind":"lookup_customer_history","history":{"customer_id":"cus_R4nT2q","display_name":'
    '"Rin","tenure_days":57,"orders":2,"prior_refunds":["2026-02-14, order 5521 (phone case), '
    '$12.99, re_3QzR8mLkP2vX9tY1e5f6"],"prior_refund_count":1,"refunded_orders":{"5521":'
    '{"refund_id":"re_3QzR8mLkP2vX9tY1e5f6","payment_ref":"pi_3QzR8mLkP2vX9tY1g7h8","amount_cents":'
    '1299,"status":"succeeded","refunded_on":"2026-02-14","workflow_id":null}}}}',
    '{"allowed":true,"principal":{"platform":"agent","user_id":"refund-bot","display_name":'
    '"refund-bot"},"role":"refund_agent","reason":"refund-bot holds refund_agent (limit '
    '$250.00)","grant_id":3,"limit_cents":25000}',
    '{"allowed":false,"principal":{"platform":"discord","user_id":"843226519037313071",'
    '"display_name":"Kai"},"role":"refund_approver","reason":"Kai holds no live refund_approver '
    'grant","grant_id":null,"limit_cents":null}',
    '{"idempotency_key":"refund-bot-0f3a9c1e7b5d2468ace013579bdf2468ace01357","workflow_id":'
    '"slack-T07QX2K4M-C07RB9Z1P-1732650011.392819","order_number":"7310","payment_ref":'
    '"pi_3QzR8mLkP2vX9tY1a0b2c3d4","amount_cents":3500,"currency":"eur"}',
    '{"refund_id":"re_3QzR8mLkP2vX9tY1i9j0","status":"pending","amount_cents":3500,'
    '"idempotency_key":"refund-bot-0f3a9c1e7b5d2468ace013579bdf2468ace01357","mode":"stripe",'
    '"attempt":2,"earlier":null}',
    '{"platform_message_id":"local-4","duplicate":true,"message":{"thread":{"platform":"local",'
    '"workspace":"local","channel":"support","thread":"t8"},"key":{"workflow_id":'
    '"local-local-support-t8","run_id":"3e1f0a9b-7c2d-4e5f-8a6b-9c0d1e2f3a4b","seq":2},"kind":'
    '"question","text":"What was damaged?","actions":[],"round":null}}',
    '{"platform_message_id":"1732650042.118204","duplicate":false,"message":{"thread":'
    '{"platform":"slack","workspace":"T07QX2K4M","channel":"C07RB9Z1P","thread":'
    '"1732650011.392819"},"key":{"workflow_id":"slack-T07QX2K4M-C07RB9Z1P-1732650011.392819",'
    '"run_id":"b7c8d9e0-f1a2-4b3c-9d4e-5f6a7b8c9d0e","seq":5},"kind":"escalation","text":'
    '"This refund needs a support agent: order 7310 (wool scarf, $35.00). ","actions":'
    '["approve","deny"],"round":2}}',
    '{"platform_message_id":"local-6","duplicate":false,"message":{"thread":{"platform":"local",'
    '"workspace":"local","channel":"support","thread":"t8"},"key":{"workflow_id":'
    '"local-local-support-t8","run_id":"3e1f0a9b-7c2d-4e5f-8a6b-9c0d1e2f3a4b","seq":3},"kind":'
    '"info","text":"Refund of $35.00 approved. Holding before the refund for the demo: a '
    'presenter releases it with /refund-release.","actions":[],"round":null}}',
    '{"thread":{"platform":"local","workspace":"local","channel":"support","thread":"t8"},"key":'
    '{"workflow_id":"local-local-support-t8","run_id":"3e1f0a9b-7c2d-4e5f-8a6b-9c0d1e2f3a4b",'
    '"seq":6},"kind":"outcome","text":"Your refund is complete: $35.00 for order 7310 (wool '
    "scarf) is on its way back to your original payment method. Reference "
    're_3QzR8mLkP2vX9tY1i9j0.","actions":[],"round":null}',
    '{"status":"refunded","message":"Your refund is complete: $35.00 for order 7310 (wool '
    "scarf) is on its way back to your original payment method. Reference "
    're_3QzR8mLkP2vX9tY1i9j0.","refund":{"refund_id":"re_3QzR8mLkP2vX9tY1i9j0",'
    '"status":"succeeded","amount_cents":3500,"idempotency_key":'
    '"refund-bot-0f3a9c1e7b5d2468ace013579bdf2468ace01357","mode":"ledger","attempt":1,'
    '"earlier":null},"detail":null}',
    '{"status":"declined","message":"A support agent declined this refund.","refund":null,'
    '"detail":null}',
    '{"status":"failed","message":"I couldn\'t issue this refund; a support agent will follow '
    'up.","refund":null,"detail":"No such payment: pi_3QzR8mLkP2vX9tY1a0b2c3d4"}',
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
        "31425e453700b3c81bbcdb82ce0eab751fd50d06ca3635850b58b0fb21994dab",
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
