"""Routing: from a profile and a call's needs to the deployments that may answer it, or a typed
refusal. Sits between the API (which maps refusals to HTTP) and the store and domain (the
catalog it reads, the planner it runs)."""
