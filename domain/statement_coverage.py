"""Which usage a provider-wide statement covers, so that no tenant's own import settles it.

A tenant's import never settles usage a provider-wide statement covers (`provider_wide`: the
providers whose usage API the reconciler reads, each with the keys it reports, or every key).
Such a receipt is a member of a provider-wide bucket; settled first by its tenant's line, it
counted as known there, so the tokens behind it became unexplained and were shared among the
other tenants' receipts on the key: a tenant importing one token for an hour moved its whole
usage onto another tenant's receipts (2026-12-07). Such lines are left out, and listed
(`Plan.ignored_lines` in domain/reconciliation.py); the import endpoint refuses them
(`reaches_provider_wide` decides both).
"""

from __future__ import annotations

from collections.abc import Mapping

# Providers whose usage a provider-wide source reports (read with an admin key, for every
# tenant on the key): provider name -> the keys (endpointRefs) it reports, or None: every key.
ProviderWide = Mapping[str, frozenset[str] | None]


def reaches_provider_wide(
    provider_wide: ProviderWide, provider: str, key: str | None, by_request_id: bool
) -> bool:
    """Whether a tenant's line (of `provider`, naming `key` or any key, by request id or by
    bucket) could settle a receipt that a provider-wide statement covers: any line of a provider
    read for every key; of a provider read for some keys, a request-id line (it names a receipt
    on any key), a bucket of any key, or of one of those keys. A bucket of a key the source does
    not report holds only receipts that no provider-wide bucket holds."""
    if provider.lower() not in provider_wide:
        return False
    keys = provider_wide[provider.lower()]
    if keys is None or by_request_id or key is None:
        return True
    return key in keys
