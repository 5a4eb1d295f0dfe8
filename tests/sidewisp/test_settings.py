from __future__ import annotations

import os
import secrets
import subprocess
import sys

from django.conf import settings

PRODUCTION_ENV = {
    "DEBUG": "0",
    "SECRET_KEY": secrets.token_urlsafe(48),
    "ALLOWED_HOSTS": "sidewisp.example.com",
    "CSRF_TRUSTED_ORIGINS": "https://sidewisp.example.com",
    "SECURE_SSL_REDIRECT": "1",
    "SIDEWISP_BASE_URL": "https://sidewisp.example.com",
}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if k not in {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS"}}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=settings.BASE_DIR,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_it_runs_tests_with_debug_off():
    assert settings.DEBUG is False


def test_a_production_configuration_passes_the_deploy_check():
    result = _manage("check", "--deploy", "--fail-level", "WARNING", env=PRODUCTION_ENV)
    assert result.returncode == 0, result.stderr
    assert "no issues" in result.stdout


def test_production_without_a_base_url_warns_at_start_up_naming_the_variable():
    env = {k: v for k, v in PRODUCTION_ENV.items() if k != "SIDEWISP_BASE_URL"}
    clean = {k: v for k, v in os.environ.items() if k != "SIDEWISP_BASE_URL"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy"],
        cwd=settings.BASE_DIR,
        env={**{k: v for k, v in clean.items() if k not in {"DEBUG", "SECRET_KEY", "ALLOWED_HOSTS"}}, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "(sidewisp.W001) SIDEWISP_BASE_URL is not set" in result.stderr
    assert "HINT: Set SIDEWISP_BASE_URL" in result.stderr


def test_it_refuses_to_start_without_a_secret_key_in_production():
    result = _manage("check", env={**PRODUCTION_ENV, "SECRET_KEY": ""})
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_it_names_the_variable_that_has_a_bad_value():
    result = _manage("check", env={**PRODUCTION_ENV, "DEBUG": "maybe"})
    assert result.returncode != 0
    assert "DEBUG must be one of" in result.stderr
    bad_db = _manage("check", env={**PRODUCTION_ENV, "DATABASE_URL": "mysql://root:hunter2@db/x"})
    assert "DATABASE_URL must be a URL starting with one of" in bad_db.stderr
    assert "hunter2" not in bad_db.stderr
