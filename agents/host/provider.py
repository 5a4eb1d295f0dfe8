"""The integration package a real model needs: `SIDEWISP_MODEL=provider:model`, checked as a process starts.

`init_chat_model("openai:gpt-4.1")` imports `langchain_openai` only when the first run builds its
graph, and then fails with a bare ImportError deep in a worker. `check_model_choice` (called from the
agents app's `ready`, so at every web and worker start) names the package and how to install it.
"""

from __future__ import annotations

import importlib
import os

from django.core.exceptions import ImproperlyConfigured

MODEL_ENV = "SIDEWISP_MODEL"
SCRIPTED = "scripted"
# The integration packages Sidewisp's own tests run a provider client through (pinned in requirements.txt).
TESTED_VERSIONS = {"langchain-openai": "1.7.4"}


def model_choice() -> str:
    """`scripted`, or the `provider:model` string of SIDEWISP_MODEL."""
    return os.environ.get(MODEL_ENV, SCRIPTED).strip() or SCRIPTED


def provider_package(choice: str) -> tuple[str, str, str]:
    """(provider, module, pip package) of an `init_chat_model` string; ImproperlyConfigured if it names none."""
    try:
        from langchain.chat_models.base import _BUILTIN_PROVIDERS, _parse_model
    except ImportError:  # a langchain that moved them: the provider is what precedes the colon
        provider = choice.split(":", 1)[0]
        module = f"langchain_{provider}"
    else:
        try:
            _, provider = _parse_model(choice, None)
        except ValueError:
            known = ", ".join(sorted(_BUILTIN_PROVIDERS))
            msg = f"{MODEL_ENV}={choice!r} names no model provider: use {SCRIPTED!r} or provider:model ({known})"
            raise ImproperlyConfigured(msg) from None
        module = _BUILTIN_PROVIDERS[provider][0]
    return provider, module, module.split(".", 1)[0].replace("_", "-")


def check_model_choice(choice: str | None = None) -> None:
    """Raise ImproperlyConfigured naming the package to install when the chosen provider's is missing."""
    choice = model_choice() if choice is None else choice
    if choice == SCRIPTED:
        return
    provider, module, package = provider_package(choice)
    try:
        importlib.import_module(module)
    except ImportError:
        version = TESTED_VERSIONS.get(package)
        command = f"pip install {package}=={version}" if version else f"pip install {package}"
        msg = f"{MODEL_ENV} names provider {provider!r}: install {package} ({command})"
        raise ImproperlyConfigured(msg) from None
