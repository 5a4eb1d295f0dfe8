#!/usr/bin/env python
"""Django's command-line utility for Sidewisp."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sidewisp.settings")
    # What `make run` chose (var/dev-settings.env), for each variable this shell does not set.
    from sidewisp.ops import devenv

    devenv.apply()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
