"""The demo team (triage, sales, support, billing, coder): the default registered graph "demo".

Its team, tools and contracts, the scenario catalogue (one real run per verdict) and the outcome
verifiers. It is one registered graph among others: nothing outside agents/demo imports it.

May import: agents.host, agents.limits, agents.observe, agents.models, agents.tasks (its commands
enqueue), receipts, the Celery app (run_scenario pings the workers); never: the rest of sidewisp.
"""
