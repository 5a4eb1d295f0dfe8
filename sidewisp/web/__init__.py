"""The HTTP layer around every view: the Content-Security-Policy and same-origin WebSocket checks, trusted
proxies, the login throttle, who may open the pages (`access`) and the refusals of bad input or an unreachable
database.

May import: receipts (actions, org, ingest.storable) and Django; never: sidewisp.pages, sidewisp.live,
sidewisp.views or sidewisp.api (pages and views build on web, not the reverse).
"""
