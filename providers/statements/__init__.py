"""Statement sources: where the reconciler learns what providers billed (their usage APIs, and
statement files imported for providers without one). Plain httpx; token counts only."""
