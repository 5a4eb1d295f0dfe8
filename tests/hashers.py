"""A password hasher for the test process only: the production algorithm (PBKDF2-SHA256) at one iteration.

Django 5.2 hashes a password with 1,000,000 PBKDF2 iterations: about a second on this two-core machine, paid
by every user a fixture makes with a password and by every `client.login`. The hash it writes is an ordinary
`pbkdf2_sha256$1$…` hash, so the production hasher checks it too: a daphne server or worker the tests start
(which keep the production hashers) accepts these passwords, and upgrades one to the full count on login, as
it would any hash made with fewer iterations. Nothing about what a test proves depends on the iteration count.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class OneIterationPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1
