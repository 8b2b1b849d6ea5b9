"""The presenter's show: the stories, their stages, and what only they need of a running stack.

    refund_bot (the composition root) -> demo -> agent, bot, worker

The product (agent/, bot/, worker/) never imports it: it offers hooks (a stage factory per
platform, a restart that can wait, Worker interceptors), and refund_bot/ wires the demo into them.
"""
