"""Pure domain code: enums, value types and rules. Imports no Temporal, FastAPI or database code,
so workflows can pass it through the sandbox and it can be tested and benchmarked alone."""
