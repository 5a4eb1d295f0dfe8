"""Single sign-on with OpenID Connect beside the local log-in (issue 22 §1; README "Single sign-on"): its
configuration, the provider's discovery, the accounts and team memberships a sign-in grants, and its views.

May import: receipts (models, org), sidewisp.ops.env and Django; never: sidewisp.pages, sidewisp.live,
sidewisp.views or sidewisp.web.
"""
