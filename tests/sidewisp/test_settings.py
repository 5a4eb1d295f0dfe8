from django.conf import settings


def test_it_runs_tests_with_debug_off():
    assert settings.DEBUG is False
