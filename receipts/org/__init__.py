"""Who people are and what they did: teams and the query scope they give, the four roles, identities from
single sign-on, and the append-only audit log.

May import: receipts.models, receipts.verdicts; never: another receipts room, sidewisp, agents.
"""
