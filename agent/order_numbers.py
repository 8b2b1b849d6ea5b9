"""Which number in a customer's words is the order: one rule, pure and deterministic.

    text -> numbers (digit groups read as one) -> not money -> named as the order? -> candidates

A candidate is a standalone run of 3 to 12 digits: not part of a word, a phone number (555-0100),
a date (17/11/2026) or a decimal, and never money: not beside a currency sign (any Unicode
currency symbol, before or after, "$5000", "5000 €", "₹5000"), an ISO 4217 code ("USD 5000",
"5000 eur"), "Rs"/"Rs." or a currency word ("5000 dollars"), not alone in parentheses ("(5000)"),
and not a number written in groups or with cents ("5,000", "5 000", "5'000", "5000.00"). A
number named as the order ("order 1234", "order #1234", "order no. 1234", "#1234") wins over any
other (only a sign written onto it, "order 5000$", makes it money); the rest count only when none
is named. More than one candidate: the text names no order
and the agent asks which (agent/policy.py). docs/conversation.md says the same to a support team.
"""

from __future__ import annotations

import re
import unicodedata


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Every ISO 4217 code in use.
CURRENCY_CODES = _names(
    """AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BHD BIF BMD BND BOB BOV BRL BSD BTN BWP BYN
    BZD CAD CDF CHE CHF CHW CLF CLP CNY COP COU CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD
    FKP GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS
    KHR KMF KPW KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK
    MXN MXV MYR MZN NAD NGN NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR
    SBD SCR SDG SEK SGD SHP SLE SOS SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH
    UGX USD USN UYI UYU UYW UZS VED VES VND VUV WST XAD XAF XAG XAU XBA XBB XBC XBD XCD XCG XDR XOF
    XPD XPF XPT XSU XTS XUA XXX YER ZAR ZMW ZWG"""
)
# Codes that are also English words: money only in capitals ("ALL 5000"), so that "order 1234
# all broken" and "please try 1234" still name the order.
CODES_THAT_ARE_WORDS = _names("ALL BAM BOB CAD COP CUP GEL MAD MOP PEN RON RUB SOS TOP TRY XXX YER")
_CURRENCY_WORDS = _names(
    """rs dollar dollars usd buck bucks cent cents euro euros pound pounds quid rupee rupees yen
    yuan peso pesos franc francs kr rand baht lira reais zloty"""
)

# A number as written: digit groups split by spaces (a space, no-break, thin or narrow no-break
# space: "5 000") or by marks ("5,000", "5'000", "5.000,00") are one number.
_SPACES = " \u00a0\u2009\u202f"
_NUMBER = re.compile(rf"(?<!\d)(?:\d{{1,3}}(?:[{_SPACES}]\d{{3}}(?!\d))+|\d+)(?:[.,'’]\d+)*")
# What, right before a number, names it as the order.
_NAMED = re.compile(r"(?:\border\s*(?:(?:number|num|no|nr|id)\b\.?\s*)?[#:]?\s*|#\s*)$", re.I)
_WORD_BEFORE = re.compile(r"([^\W\d_]+)\.?$")
_WORD_AFTER = re.compile(r"^([^\W\d_]+)")
# Next to a bare number, these make it part of something else: a word, a phone number, a date.
_GLUED_BEFORE = re.compile(r"[\w\-/.,+]$")
_GLUED_AFTER = re.compile(r"^(?:[\w\-/%]|[.,]\d)")
MIN_DIGITS, MAX_DIGITS = 3, 12


def _is_currency_word(word: str) -> bool:
    upper = word.upper()
    if upper in CURRENCY_CODES:
        return word == upper or upper not in CODES_THAT_ARE_WORDS
    return word.lower() in _CURRENCY_WORDS


def _is_money(before: str, after: str) -> bool:
    """A currency sign, code or word next to the number (spaces between allowed), or
    parentheses around it alone."""
    before, after = before.rstrip(_SPACES + "\t\n"), after.lstrip(_SPACES + "\t\n")
    if before[-1:] and unicodedata.category(before[-1]) == "Sc":
        return True
    if after[:1] and unicodedata.category(after[0]) == "Sc":
        return True
    if before.endswith("(") and after.startswith(")"):
        return True
    word = _WORD_BEFORE.search(before[-20:])
    if word and _is_currency_word(word.group(1)):
        return True
    word = _WORD_AFTER.match(after[:20])
    return bool(word and _is_currency_word(word.group(1)))


def order_number_candidates(text: str) -> tuple[str, ...]:
    """The numbers in `text` that may be the order, each once, in order: those named as the
    order if any is, else every other one that is not money."""
    named: list[str] = []
    bare: list[str] = []
    for match in _NUMBER.finditer(text):
        digits = match.group()
        if not digits.isdigit() or not MIN_DIGITS <= len(digits) <= MAX_DIGITS:
            continue  # grouped, with cents, or the wrong length
        before = text[max(0, match.start() - 40) : match.start()]
        after = text[match.end() : match.end() + 40]
        if _GLUED_AFTER.match(after):
            continue
        if _NAMED.search(before):
            # Named: only a sign written onto it makes it money ("order 5000$"); a code or sign
            # after a space belongs to what follows ("order 1234 USD 5000").
            if not (after[:1] and unicodedata.category(after[0]) == "Sc"):
                named.append(digits)
        elif not _GLUED_BEFORE.search(before) and not _is_money(before, after):
            bare.append(digits)
    return tuple(dict.fromkeys(named or bare))


def find_order_number(text: str) -> str | None:
    """The order `text` names: its one candidate; None when it has none, or more than one."""
    candidates = order_number_candidates(text)
    return candidates[0] if len(candidates) == 1 else None


# Conversations started before Workflow 1.2 read the first standalone number as the order, and
# keep reading it so to their end (agent.versions.PATCHES, "order-number-named").
_CURRENCY_SIGNS = "$€£¥"
_FIRST_WORDS = r"dollars?|usd|eur|euros?|gbp|pounds?|bucks|cents?"
_FIRST_NUMBER = re.compile(
    rf"(?:#|(?<![\w\-.,{_CURRENCY_SIGNS}])(?<![{_CURRENCY_SIGNS}]\s))(\d{{3,12}})"
    rf"(?![\w\-]|[.,]\d|\s*(?:{_FIRST_WORDS})\b|\s*[{_CURRENCY_SIGNS}])",
    re.IGNORECASE,
)


def first_number(text: str) -> str | None:
    """The first standalone number of 3 to 12 digits: the order, as 1.1 read it."""
    match = _FIRST_NUMBER.search(text)
    return match.group(1) if match else None
