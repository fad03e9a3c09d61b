"""The "Where the time goes" part of the invoke benchmark's section: the pieces of a gateway
call timed alone, the calls' timelines from their receipts, PostgreSQL statements and Temporal
requests per invocation; then the reading."""

from __future__ import annotations

from typing import Any

from bench.invoke_report_reading import analysis
from bench.invoke_results import DB_STEPS, Results, f1, f2, pct, probe_p50


def where_section(res: Results, m: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    pr = res.probes
    dec = res.receipts.decomposition
    pieces = [
        (
            "a whole gateway call (non-stream) paced one every 100 ms, for comparison",
            "gateway_paced",
        ),
        ("HTTP into the API and back: `GET /healthz`", "api_healthz"),
        ("…with bearer-token check and one DB read: `GET /v1/models`", "api_models"),
        ("request model, canonical JSON and hash", "api_parse_and_hash"),
        (
            "DB: idempotency lookup (`receipts.by_key`, own session; only on a used key now)",
            "db_idempotency_lookup",
        ),
        ("DB: catalog version (one statement, straight on asyncpg)", "db_catalog_version"),
        (
            "routing: catalog view (`SnapshotCache.view`: the version read, then the profile "
            "and deployments from the snapshot in memory)",
            "catalog_view",
        ),
        (
            "routing on the snapshot in memory (`SnapshotCache.cached`: no read; a call without "
            "a budget routes so, its claim checks the version)",
            "catalog_cached",
        ),
        (
            "DB: claim with the catalog version check (`WITH claimed AS (INSERT … SELECT … "
            "WHERE <version> = :expected ON CONFLICT DO NOTHING RETURNING) SELECT CASE …`, "
            "one statement)",
            "db_claim",
        ),
        (
            "DB: finalize (`WITH closed AS (UPDATE … RETURNING) INSERT INTO outbox_events …`, "
            "one statement)",
            "db_finalize",
        ),
        ("DB floor: bare asyncpg `SELECT 1`", "db_raw_select1"),
        ("Temporal: `start_workflow` (eager) returns", "temporal_start_returned"),
        (
            "Temporal: eager start of `InvokeModel` to its local activity running (stub)",
            "temporal_start_to_activity",
        ),
        ("Temporal: eager start to the workflow's result (stub)", "temporal_start_to_result"),
        (
            "…the same three without the workflow sandbox (`UnsandboxedWorkflowRunner`): "
            "start returns",
            "temporal_start_returned_unsandboxed",
        ),
        ("…to the local activity", "temporal_start_to_activity_unsandboxed"),
        ("…to the result", "temporal_start_to_result_unsandboxed"),
        (
            "provider: OpenAI adapter streaming from the simulator, to first text",
            "provider_adapter_first_token",
        ),
        (
            "provider: OpenAI adapter streaming from the simulator, whole answer",
            "provider_adapter_stream",
        ),
        ("artifact write (content-addressed file)", "artifact_put"),
    ]
    lines = [
        "### Where the time goes",
        "",
        "Each piece of a gateway call timed alone, one at a time, from the benchmark's process "
        "with the product's own functions and an engine built like the API's "
        f"({len(pr.get('api_healthz', []))} calls each after warm-up; p50 ms):",
        "",
        "| piece | p50 ms | p95 ms |",
        "|---|---:|---:|",
    ]
    for label, key in pieces:
        values = [x * 1000 for x in pr.get(key, [])]
        lines.append(f"| {label} | {f2(pct(values, 0.5))} | {f2(pct(values, 0.95))} |")
    db_sum = sum(probe_p50(pr, k) for k in DB_STEPS)
    lines += [
        "",
        f"The database steps of a call (the claim with its catalog version check, the "
        "finalize; the idempotency lookup only runs on a used key, the version read only "
        "with a budget or after the catalog moved) "
        f"add up to {db_sum:.1f} ms at p50, against "
        f"{probe_p50(pr, 'db_raw_select1'):.2f} ms for a bare round trip.",
        "",
        "The gateway calls themselves, on a timeline from the client's clock and the receipt's "
        "timestamps (p50 of each part, ms; the parts' p50s need not add up to the total's):",
        "",
        "| non-stream, c=1 | calls | total at the client | send → receipt claimed | "
        "claimed → finalized | of which the provider call (activity's timing, whole ms) | "
        "finalized → response received |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for group, label in (
        ("ns1", "back to back"),
        ("paced", "one every 100 ms"),
        ("idle", "one every 500 ms (past the 0.25 s window: the health check's way)"),
    ):
        d = dec.get(group, {})
        if not d:
            continue
        lines.append(
            f"| {label} | {len(d['client'])} | {f1(pct(d['client'], 0.5))} "
            f"| {f1(pct(d['before'], 0.5))} | {f1(pct(d['window'], 0.5))} "
            f"| {f1(pct(d['provider'], 0.5))} | {f1(pct(d['after'], 0.5))} |"
        )
    lines.append("")
    lines.append(
        "Before the claim the API verifies the token and plans on the catalog snapshot it "
        "holds (the profile, the plan's inputs and the deployments), and the claim checks in "
        "the same statement that the snapshot's version is current; after it, it starts the "
        "workflow eagerly and begins the provider call alongside (Temporal accepted a start "
        "moments before, `INVOKE_START_OVERLAP_SECONDS`, or, after a quieter spell, its health "
        "service answered while the start was under way); the call's task writes the finalize "
        "as soon as it has ended, and the receipt travels through the in-memory hub to the "
        "response at once while fewer than `INVOKE_ANSWERS_AHEAD` answers are ahead of their "
        "starts' replies, else once the start is in. The workflow's local "
        "activity adopts the call meanwhile, off the response path."
    )
    if res.receipts.receipt_ttft_ms:
        lines[-1] += (
            " Streaming, the call saw the first token "
            f"{f1(pct(res.receipts.receipt_ttft_ms, 0.5))} ms after the claim (p50)."
        )
    if res.pg:
        kinds = ", ".join(f"{k} {v:.1f}" for k, v in res.pg["kinds"].items())
        lines += [
            "",
            f"PostgreSQL, statement log over {res.pg['calls']} gateway calls: "
            f"{res.pg['per_call']:.1f} statements per invocation ({kinds}), "
            f"{res.pg['server_ms_per_call']:.2f} ms of server time per invocation "
            "(parse/bind/execute durations as PostgreSQL logs them).",
        ]
    if res.temporal_per_call:
        ops = ", ".join(
            f"{k} {v:.2f}"
            for k, v in sorted(res.temporal_per_call.items(), key=lambda kv: -kv[1])
            if v >= 0.05
        )
        lines += [
            "",
            f"Temporal frontend requests per invocation during the c=16 non-stream runs "
            f"(server metrics, every client counted): {ops}.",
        ]
    lines += ["", *analysis(res, m)]
    return lines
