"""The live pages: the hub that renders each change once per page and audience (`hub`), the renderer that
cuts the fragments and messages (`render`), the threads renders run on (`threads`), and the WebSocket
consumer (`consumers`).

May import: sidewisp.pages, receipts (broadcast, org, queries), Django and Channels; never: sidewisp.views,
sidewisp.api or sidewisp.urls (the pages and the socket share pages' context builders, not views).
"""
