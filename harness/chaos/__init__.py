"""The chaos drill: every component of a running deployment faulted at random, then audited.

    deployment.py  the processes (refund-bot run, or two bots and a supervised Worker on
                   PostgreSQL), a Temporal dev server the drill owns, the Slack fake
    processes.py   those processes: killed, paused, restarted as a service manager would
    edge.py        Slack's side: customer events POSTed to the bots, retried until acknowledged
    stories.py     the conversations, every kind, told as people in Slack tell them
    faults.py      the faults and their seeded schedule
    audit.py       the invariants, read from each fact's owner at the end
    drill.py       all of it in order: run_chaos(ChaosConfig) -> ChaosReport

bench/chaos.py runs it for minutes on either backend; tests/test_chaos.py runs a small one.
"""
