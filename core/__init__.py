"""Cross-cutting pieces every edge shares: settings and security primitives."""
