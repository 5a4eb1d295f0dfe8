"""A real OpenID Connect provider for the single-sign-on tests: django-oauth-toolkit in a process of its own.

`python -m tests.sso.provider.serve` migrates its own SQLite database, makes the people of its people file
(IDP_PEOPLE) and the client (IDP_CLIENT_ID, IDP_CLIENT_SECRET, IDP_REDIRECT_URI), and serves on a free
loopback port, which it prints. Each person's groups and token fault are read from the file at every token,
so a test changes someone's groups between two sign-ins by rewriting it.
"""
