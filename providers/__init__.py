"""Provider access: the adapter interface and normalised stream events (types, base), error
classification (errors), the Secret Broker (secrets), the adapters over the official openai and
anthropic SDKs plus rerank over HTTP, the registry that picks one per deployment, and the
local upstream simulator (providers.upstream) that tests and `make dev` point them at."""
