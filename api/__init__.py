"""HTTP surface: app factory, auth, problem+json errors, one router module per resource."""
