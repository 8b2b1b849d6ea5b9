"""Reading a Prometheus exporter's page (/metrics), as a test reads what refund-bot exports.

GET /metrics (scrape) -> the text -> total(name, labels): the sum a dashboard's `sum by` reads
"""

from __future__ import annotations

import aiohttp


def total(text: str, name: str, **labels: str) -> float:
    """The sum over every series of `name` with these labels (as a dashboard's `sum by` reads);
    no such series at all fails, so a zero is one the exporter wrote."""
    found = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items())
    ]
    assert found, f"no {name} with {labels} in /metrics"
    return sum(found)


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        return await resp.text()
