"""Discord: the discord.py adapter (inbound) and the REST-only outbound half the Worker uses."""
