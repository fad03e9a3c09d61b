"""The providers whose usage the reconciler reads from the provider itself (their usage APIs,
with an admin key, for every tenant on a key), as the settings configure the sources: what a
tenant's statement import may not settle (domain/statement_coverage.py). Read by
the reconciler and by the import endpoint, from the same settings."""

from __future__ import annotations

from core.settings import Settings
from domain.statement_coverage import ProviderWide
from providers.statements.anthropic_usage import AnthropicUsageSource
from providers.statements.openai_usage import OpenAIUsageSource


def provider_wide(settings: Settings) -> ProviderWide:
    """The providers whose usage the reconciler reads from the provider itself, for every tenant
    on a key, as `settings` configure the sources (activities/reconciliation.py): each with the
    endpointRefs its key map names, or None when the map is empty (the organization's usage is
    all the router's: every key)."""
    out: dict[str, frozenset[str] | None] = {}
    for provider, admin_ref, key_refs in (
        (
            OpenAIUsageSource.provider,
            settings.statements_openai_admin_ref,
            settings.statements_openai_key_refs,
        ),
        (
            AnthropicUsageSource.provider,
            settings.statements_anthropic_admin_ref,
            settings.statements_anthropic_key_refs,
        ),
    ):
        if admin_ref:
            out[provider] = frozenset(key_refs.values()) if key_refs else None
    return out
