"""Slack: the slack-bolt adapter (inbound) and the Web API outbound half the Worker uses."""
