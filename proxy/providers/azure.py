"""Azure OpenAI: OpenAI's API under deployment paths (`/openai/deployments/D/chat/completions`)
and `/openai/v1/`; `api-version` keys the request, `api-key` is a credential."""

from __future__ import annotations

from dataclasses import replace

from tapeproxy.providers import openai

# Azure's own headers that differ on every call (its gateway's and its region's ids).
VOLATILE = frozenset({"apim-request-id", "azureml-model-session", "openai-processing-ms"})

# OpenAI's shapes, errors and streams; `api-version` rides in the query, which is keyed, and
# `api-key` is one of the credential headers never stored (redaction/credentials.py).
PROVIDER = replace(
    openai.PROVIDER,
    name="azure",
    base_url="https://RESOURCE.openai.azure.com",
    hosts=("*.openai.azure.com", "*.cognitiveservices.azure.com", "*.services.ai.azure.com"),
    volatile_headers=VOLATILE,
    volatile_prefixes=("x-ms-",),
)
