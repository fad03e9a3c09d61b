"""The pure rules behind the scheduled jobs: statement matching and allocation, statement-file
parsing, probe windows and latency statistics."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.enums import DeploymentState, UsageStatus
from domain.health import (
    ProbeOutcome,
    ProbeResult,
    ProbeTarget,
    ProbeVerdict,
    latency_stats,
    own_network_suspected,
    percentile,
    probe_window,
    verdict,
)
from domain.reconciliation import (
    NOTHING_SENT,
    OPEN,
    PAST_RECEIPT,
    SHARED_ID,
    Rule,
    Settlement,
    allocate,
    allocate_capped,
    model_matches,
    plan,
)
from domain.statement_coverage import ProviderWide, reaches_provider_wide
from domain.statements import ReceiptUsage, StatementLine
from providers.statements.imports import CSV, JSONL, StatementFileError, parse, statement_lines

H = datetime(2026, 11, 30, 10, tzinfo=UTC)
KEY = "env:OPENAI_API_KEY"


def receipt(n: int, status: UsageStatus = UsageStatus.UNKNOWN, **over: object) -> ReceiptUsage:
    values: dict[str, object] = {
        "invocation_id": f"inv-{n:02d}",
        "tenant_id": "t1",
        "provider": "openai",
        "model": "gpt-4o",
        "key": KEY,
        "started_at": H + timedelta(minutes=n),
        "usage_status": status,
    }
    values.update(over)
    return ReceiptUsage.model_validate(values)


def bucket(inp: int, out: int, cached: int = 0, **over: object) -> StatementLine:
    values: dict[str, object] = {
        "statement_ref": "openai-usage/10h/gpt-4o",
        "source": "openai-usage",
        "provider": "openai",
        "model": "gpt-4o-2024-08-06",
        "key": KEY,
        "bucket_start": H,
        "bucket_end": H + timedelta(hours=1),
        "input_tokens": inp,
        "output_tokens": out,
        "cached_input_tokens": cached,
    }
    values.update(over)
    return StatementLine.model_validate(values)


def tokens(settlements: tuple[Settlement, ...]) -> dict[str, tuple[int, int, int]]:
    return {
        s.invocation_id: (s.input_tokens, s.output_tokens, s.cached_input_tokens)
        for s in settlements
    }


def applied(receipts: list[ReceiptUsage], settled: tuple[Settlement, ...]) -> list[ReceiptUsage]:
    by_id = {s.invocation_id: s for s in settled}
    out = []
    for r in receipts:
        s = by_id.get(r.invocation_id)
        if s is None:
            out.append(r)
        else:
            out.append(
                r.model_copy(
                    update={
                        "usage_status": UsageStatus.RECONCILED,
                        "input_tokens": s.input_tokens,
                        "output_tokens": s.output_tokens,
                        "cached_input_tokens": s.cached_input_tokens,
                    }
                )
            )
    return out


# -- allocation ------------------------------------------------------------------------------
def test_largest_remainder_adds_up_and_breaks_ties_by_position() -> None:
    assert allocate(10, [1, 1, 1]) == [4, 3, 3]
    assert allocate(2, [1, 1, 1]) == [1, 1, 0]
    assert allocate(7, [0, 0]) == [4, 3]
    assert allocate(100, [3, 1]) == [75, 25]
    assert allocate(0, [5, 5]) == [0, 0]


@given(st.integers(0, 10**9), st.lists(st.integers(0, 10**6), min_size=1, max_size=30))
def test_allocation_is_exact_and_within_one_of_the_quota(total: int, weights: list[int]) -> None:
    shares = allocate(total, weights)
    assert sum(shares) == total
    effective = weights if sum(weights) else [1] * len(weights)
    for share, w in zip(shares, effective, strict=True):
        quota = total * w / sum(effective)
        assert quota - 1 < share < quota + 1


def test_a_capped_share_passes_its_excess_on_and_what_none_can_take_is_left_out() -> None:
    assert allocate_capped(100, [1, 1, 1], [10, None, None]) == [10, 45, 45]
    assert allocate_capped(100, [1, 1], [30, 30]) == [30, 30]  # 40 left out
    assert allocate_capped(10, [1, 1], [None, None]) == allocate(10, [1, 1])


@given(
    st.integers(0, 10**7),
    st.lists(st.tuples(st.integers(0, 1000), st.none() | st.integers(0, 10**6)), min_size=1),
)
def test_capped_shares_never_pass_their_cap_nor_the_total(
    total: int, weighted: list[tuple[int, int | None]]
) -> None:
    weights, caps = [w for w, _ in weighted], [c for _, c in weighted]
    shares = allocate_capped(total, weights, caps)
    assert sum(shares) <= total
    assert all(c is None or share <= c for share, c in zip(shares, caps, strict=True))
    if any(c is None for c in caps):
        assert sum(shares) == total  # an uncapped share takes whatever is left


def test_no_receipt_is_settled_past_its_models_context_window() -> None:
    """Health probes and evaluations write no receipt, nor do others on a shared key: a bucket
    of 30 million tokens went whole to the one receipt awaiting, a timed-out call settled at
    30 million tokens (about $75 of someone else's usage)."""
    lone = receipt(1, context_window_tokens=128_000)
    result = plan([bucket(30_000_000, 200_000)], [lone])
    # The window holds input and output together, split as the bucket's tokens are.
    in_share = 128_000 * 30_000_000 // 30_200_000
    assert tokens(result.settlements) == {"inv-01": (in_share, 128_000 - in_share, 0)}
    assert (result.unattributed_input_tokens, result.unattributed_output_tokens) == (
        30_000_000 - in_share,
        200_000 - (128_000 - in_share),
    )
    room = plan([bucket(100_000, 50_000)], [receipt(1, context_window_tokens=128_000)])
    assert tokens(room.settlements) == {"inv-01": (85_333, 42_667, 0)}  # 2:1, as the bucket
    # Within the bound, the bucket is shared out whole, as before.
    two = [receipt(1, context_window_tokens=128_000), receipt(2, context_window_tokens=128_000)]
    shared = plan([bucket(1000, 100)], two)
    assert sum(s.input_tokens for s in shared.settlements) == 1000
    assert shared.unattributed_input_tokens == 0


def test_dated_snapshots_match_their_alias_only() -> None:
    assert model_matches("gpt-4o-2024-08-06", "gpt-4o")
    assert model_matches("claude-sonnet-4-20250514", "claude-sonnet-4")
    assert model_matches("gpt-4o", "gpt-4o")
    assert not model_matches("gpt-4o-mini", "gpt-4o")
    assert not model_matches("gpt-4o-mini-2024-07-18", "gpt-4o")


# -- matching --------------------------------------------------------------------------------
def test_request_id_lines_settle_exactly_and_only_their_tenant() -> None:
    mine = receipt(1, provider_request_id="req_1")
    other = receipt(2, tenant_id="t2", provider_request_id="req_1")
    line = bucket(
        120,
        30,
        statement_ref="import/x#L2",
        source="import/x",
        tenant_id="t1",
        provider_request_id="req_1",
        bucket_start=None,
        bucket_end=None,
        model=None,
    )
    result = plan([line], [mine, other])
    assert [(s.invocation_id, s.rule) for s in result.settlements] == [("inv-01", Rule.REQUEST_ID)]
    assert tokens(result.settlements) == {"inv-01": (120, 30, 0)}


def test_a_request_id_two_receipts_carry_settles_neither() -> None:
    """A self-hosted server numbering its requests from 1 again: one line gave both receipts
    its whole count. Neither is named by it now, this pass or a later one after one of them
    was settled (a receipt settled before carries the id too)."""
    line = bucket(
        120,
        30,
        statement_ref="import/x#L2",
        source="import/x",
        provider_request_id="chatcmpl-7",
        bucket_start=None,
        bucket_end=None,
        model=None,
    )
    first = receipt(1, provider_request_id="chatcmpl-7")
    second = receipt(2, tenant_id="t2", provider_request_id="chatcmpl-7")
    result = plan([line], [first, second])
    assert result.settlements == ()
    assert {(s.invocation_id, s.reason) for s in result.skipped} == {
        ("inv-01", SHARED_ID),
        ("inv-02", SHARED_ID),
    }
    settled_before = first.model_copy(
        update={"usage_status": UsageStatus.RECONCILED, "input_tokens": 120, "output_tokens": 30}
    )
    assert plan([line], [settled_before, second]).settlements == ()
    # A tenant's own line names only its tenant's receipt: that one it settles.
    own = line.model_copy(update={"tenant_id": "t1"})
    assert tokens(plan([own], [first, second]).settlements) == {"inv-01": (120, 30, 0)}


def test_unexplained_tokens_are_shared_by_estimate_and_a_second_pass_settles_nothing() -> None:
    receipts = [
        receipt(1, UsageStatus.REPORTED, input_tokens=100, output_tokens=10),
        receipt(2, UsageStatus.ESTIMATED, input_tokens=300, output_tokens=30),
        receipt(3, UsageStatus.ESTIMATED, input_tokens=100, output_tokens=10),
        receipt(4),  # Unknown: weighs the mean estimate (200 in, 20 out)
        receipt(5, started_at=H + timedelta(hours=1)),  # the next bucket
        receipt(6, key="env:OTHER_KEY"),  # another provider key
    ]
    first = plan([bucket(1300, 130, 600)], receipts)
    assert tokens(first.settlements) == {
        "inv-02": (600, 60, 300),
        "inv-03": (200, 20, 100),
        "inv-04": (400, 40, 200),
    }
    assert {s.statement_ref for s in first.settlements} == {"openai-usage/10h/gpt-4o"}
    second = plan([bucket(1300, 130, 600)], applied(receipts, first.settlements))
    assert second.settlements == ()


def test_nothing_settles_to_zero_unless_asked() -> None:
    receipts = [receipt(1, UsageStatus.REPORTED, input_tokens=50, output_tokens=5), receipt(2)]
    fully_explained = bucket(50, 5)
    result = plan([fully_explained], receipts)
    assert result.settlements == ()
    assert [s.invocation_id for s in result.skipped] == ["inv-02"]
    allowed = plan([fully_explained], receipts, settle_zero=True)
    assert tokens(allowed.settlements) == {"inv-02": (0, 0, 0)}


def test_an_open_receipt_is_never_settled_and_holds_its_bucket_back() -> None:
    # A call still running past the settle delay: its usage is not final, and its close would
    # write over a settlement. Its request-id line waits, and so does its bucket, whole (the
    # bucket's total holds the open call's tokens).
    running = receipt(1, provider_request_id="req_1", open=True)
    line = bucket(
        120,
        30,
        statement_ref="import/x#L2",
        source="import/x",
        tenant_id="t1",
        provider_request_id="req_1",
        bucket_start=None,
        bucket_end=None,
        model=None,
    )
    by_id = plan([line], [running])
    assert by_id.settlements == ()
    assert [(k.invocation_id, k.reason) for k in by_id.skipped] == [("inv-01", OPEN)]
    members = [receipt(2, open=True), receipt(3), receipt(4, UsageStatus.ESTIMATED, input_tokens=9)]
    held = plan([bucket(1000, 100)], members)
    assert held.settlements == ()
    assert {(k.invocation_id, k.reason) for k in held.skipped} == {
        ("inv-02", OPEN),
        ("inv-03", OPEN),
        ("inv-04", OPEN),
    }
    closed = [m.model_copy(update={"open": False}) for m in members]
    assert len(plan([bucket(1000, 100)], closed).settlements) == 3


def test_a_receipt_that_called_no_provider_takes_no_share_of_a_bucket() -> None:
    # Denials, refusals and missing credentials close Estimated at our count of zero. A bucket
    # whose unexplained tokens (a health probe, another client on the key) met only such
    # receipts shared them out equally, billing calls that never reached the provider.
    denied = [receipt(n, UsageStatus.ESTIMATED, input_tokens=0, output_tokens=0) for n in (1, 2)]
    alone = plan([bucket(500, 50)], denied)
    assert alone.settlements == ()
    assert {(s.invocation_id, s.reason) for s in alone.skipped} == {
        ("inv-01", NOTHING_SENT),
        ("inv-02", NOTHING_SENT),
    }
    zeros = plan([bucket(500, 50)], denied, settle_zero=True)
    assert tokens(zeros.settlements) == {"inv-01": (0, 0, 0), "inv-02": (0, 0, 0)}

    beside = plan([bucket(500, 50)], [*denied, receipt(3)])
    assert tokens(beside.settlements) == {"inv-03": (500, 50, 0)}
    assert [s.invocation_id for s in beside.skipped] == ["inv-01", "inv-02"]


def test_a_share_past_what_a_receipt_holds_is_skipped_and_the_rest_settle() -> None:
    # A key shared with traffic outside the gateway: the hour's unexplained tokens all fall to
    # the one receipt awaiting them, past its INTEGER columns.
    later = H + timedelta(hours=2)  # outside the bucket
    receipts = [receipt(1), receipt(2, provider_request_id="req_2", started_at=later)]
    exact = bucket(
        2**31,
        1,
        statement_ref="openai-usage/req_2",
        provider_request_id="req_2",
        bucket_start=None,
        bucket_end=None,
        model=None,
    )
    result = plan([bucket(3 * 10**9, 5), exact], receipts)
    assert result.settlements == ()
    assert {(s.invocation_id, s.reason) for s in result.skipped} == {
        ("inv-01", PAST_RECEIPT),
        ("inv-02", PAST_RECEIPT),
    }
    fits = plan([bucket(2**31 - 1, 5)], [receipt(1)])
    assert tokens(fits.settlements) == {"inv-01": (2**31 - 1, 5, 0)}


def test_cached_tokens_never_exceed_the_input_share() -> None:
    receipts = [receipt(1), receipt(2), receipt(3)]
    result = plan([bucket(2, 9, 2)], receipts)
    for i, _, c in tokens(result.settlements).values():
        assert c <= i


def test_cache_writes_are_shared_with_the_input_and_never_past_the_uncached_input() -> None:
    """Anthropic's statement names its cache writes apart (billed dearer): they were folded
    into plain input, and the settled cost priced them as such."""
    receipts = [receipt(1), receipt(2), receipt(3)]
    result = plan([bucket(30, 9, 10, cache_write_input_tokens=20)], receipts)
    written = {s.invocation_id: s.cache_write_input_tokens for s in result.settlements}
    # Inputs 10 each, reads 4, 3, 3, writes 7, 7, 6 by the input weights: the first's write
    # share takes what its read left of its input, 6.
    assert tokens(result.settlements) == {
        "inv-01": (10, 3, 4),
        "inv-02": (10, 3, 3),
        "inv-03": (10, 3, 3),
    }
    assert written == {"inv-01": 6, "inv-02": 7, "inv-03": 6}
    # Known writes explain the bucket's as known input explains its input.
    known = receipt(4, UsageStatus.REPORTED, input_tokens=10, cache_write_input_tokens=8)
    again = plan([bucket(20, 0, 0, cache_write_input_tokens=10)], [receipt(1), known])
    assert [(s.input_tokens, s.cache_write_input_tokens) for s in again.settlements] == [(10, 2)]
    exact = bucket(
        50,
        5,
        10,
        cache_write_input_tokens=30,
        provider_request_id="req_w",
        bucket_start=None,
        bucket_end=None,
        model=None,
    )
    by_id = plan([exact], [receipt(1, provider_request_id="req_w")]).settlements
    assert [(s.rule, s.cached_input_tokens, s.cache_write_input_tokens) for s in by_id] == [
        (Rule.REQUEST_ID, 10, 30)
    ]


def test_a_tenants_own_statement_goes_before_the_providers_and_is_not_counted_twice() -> None:
    receipts = [receipt(1), receipt(2)]
    own = bucket(
        40, 4, statement_ref="import/a#L2", source="import/a", tenant_id="t1", model="gpt-4o"
    )
    provider_wide = bucket(1000, 100)
    result = plan([provider_wide, own], receipts)
    assert tokens(result.settlements) == {"inv-01": (20, 2, 0), "inv-02": (20, 2, 0)}
    assert {s.statement_ref for s in result.settlements} == {"import/a#L2"}


# OpenAI's Usage API read for every key (MODEL_ROUTER_STATEMENTS_OPENAI_ADMIN_REF, no key map).
EVERY_OPENAI_KEY: ProviderWide = {"openai": None}


def own_line(inp: int, out: int, ref: str = "import/a#L2", **over: object) -> StatementLine:
    """A line of tenant t1's own import."""
    own = bucket(inp, out)
    return own.model_validate(
        {
            **own.model_dump(),
            "statement_ref": ref,
            "source": ref.split("#")[0],
            "tenant_id": "t1",
            "model": "gpt-4o",
            **over,
        }
    )


def test_a_tenants_import_does_not_move_its_usage_onto_other_tenants_receipts() -> None:
    """Tenant t1's import for a provider whose usage API is read for every tenant on the key
    settled t1's receipt at its own figures first; the provider's bucket then took them as
    known, and the tokens behind them went to t2's receipt: 1 token imported, t2 settled at
    99,999 of 100,000. t1's lines for that usage are left out, on every pass."""
    a, b = receipt(1), receipt(2, tenant_id="t2")
    provider_wide = bucket(100_000, 10_000)
    fair = {"inv-01": (50_000, 5_000, 0), "inv-02": (50_000, 5_000, 0)}
    alone = plan([provider_wide], [a, b], provider_wide=EVERY_OPENAI_KEY)
    assert tokens(alone.settlements) == fair

    by_bucket = own_line(1, 0)
    by_id = own_line(
        1, 0, "import/b#L2", provider_request_id="req_a", bucket_start=None, bucket_end=None
    )
    a = a.model_copy(update={"provider_request_id": "req_a"})
    for line in (by_bucket, by_id):
        together = plan([line, provider_wide], [a, b], provider_wide=EVERY_OPENAI_KEY)
        assert tokens(together.settlements) == fair
        assert {s.statement_ref for s in together.settlements} == {provider_wide.statement_ref}
        assert together.ignored_lines == (line.statement_ref,)
        # The import's pass before the provider published the hour, then the provider's.
        early = plan([line], [a, b], provider_wide=EVERY_OPENAI_KEY)
        assert early.settlements == () and early.ignored_lines == (line.statement_ref,)
        later = plan([line, provider_wide], [a, b], provider_wide=EVERY_OPENAI_KEY)
        assert tokens(later.settlements) == fair
        again = plan(
            [line, provider_wide],
            applied([a, b], later.settlements),
            provider_wide=EVERY_OPENAI_KEY,
        )
        assert again.settlements == ()
    # A provider no usage API is read for: the tenant's import is the only statement of it.
    vllm = [r.model_copy(update={"provider": "vllm"}) for r in (a, b)]
    own = own_line(40, 4, provider="vllm")
    assert tokens(plan([own], vllm, provider_wide=EVERY_OPENAI_KEY).settlements) == {
        "inv-01": (40, 4, 0)
    }


def test_a_tenants_import_settles_its_own_key_the_provider_wide_source_does_not_report() -> None:
    """With a key map, the usage API reports the keys it names only: a tenant's bucket of
    another key of its own is its usage alone, and settles; a line of a reported key, of any
    key, or by request id (a call on any key) is left out."""
    reported = {"openai": frozenset({KEY})}
    own_key = "env:OPENAI_KEY_T1"
    mine = receipt(1, provider_request_id="req_1")
    mine_elsewhere = receipt(3, key=own_key)
    theirs = receipt(2, tenant_id="t2")
    lines = [
        bucket(100_000, 10_000),
        own_line(700, 70, "import/a#L2", key=own_key),
        own_line(1, 0, "import/a#L3", key=KEY),
        own_line(1, 0, "import/a#L4"),  # any key
        own_line(
            1, 0, "import/a#L5", provider_request_id="req_1", bucket_start=None, bucket_end=None
        ),
    ]
    result = plan(lines, [mine, mine_elsewhere, theirs], provider_wide=reported)
    assert tokens(result.settlements) == {
        "inv-01": (50_000, 5_000, 0),
        "inv-02": (50_000, 5_000, 0),
        "inv-03": (700, 70, 0),
    }
    assert result.ignored_lines == ("import/a#L3", "import/a#L4", "import/a#L5")
    assert reaches_provider_wide(reported, "OpenAI", KEY, by_request_id=False)
    assert not reaches_provider_wide(reported, "openai", own_key, by_request_id=False)
    assert reaches_provider_wide(reported, "openai", own_key, by_request_id=True)
    assert not reaches_provider_wide(reported, "anthropic", None, by_request_id=True)


def test_an_import_row_for_usage_a_provider_wide_source_reports_is_refused() -> None:
    text = (
        "provider,providerRequestId,bucketStart,bucketWidth,model,key,inputTokens,outputTokens\n"
        "vllm,,2026-11-30T10:00:00Z,1h,qwen2.5-coder,pool:tenant-a/vllm,100,20\n"
        "openai,,2026-11-30T10:00:00Z,1h,gpt-4o,env:OPENAI_KEY_T1,1,0\n"
        "openai,req_1,,,,,1,0\n"
        "anthropic,,2026-11-30T10:00:00Z,1h,claude-sonnet-4,,1,0\n"
    )
    assert len(parse(text, CSV)) == 4  # no source read provider-wide: every row is the tenant's
    with pytest.raises(StatementFileError) as caught:
        parse(text, CSV, EVERY_OPENAI_KEY)
    assert [(e.line, e.field) for e in caught.value.errors] == [(3, "provider"), (4, "provider")]
    assert "openai's own usage statement" in caught.value.errors[0].message
    # Reporting some keys: a bucket of a key it does not report is the tenant's.
    with pytest.raises(StatementFileError) as caught:
        parse(text, CSV, {"openai": frozenset({KEY}), "anthropic": None})
    assert [(e.line, e.field) for e in caught.value.errors] == [(4, "provider"), (5, "provider")]


def test_bucket_bounds_are_start_inclusive_end_exclusive() -> None:
    at_start = receipt(1, started_at=H)
    at_end = receipt(2, started_at=H + timedelta(hours=1))
    result = plan([bucket(10, 1)], [at_start, at_end])
    assert [s.invocation_id for s in result.settlements] == ["inv-01"]


# -- statement files -------------------------------------------------------------------------
def test_csv_and_json_lines_parse_to_statement_lines() -> None:
    csv_text = (
        "provider,providerRequestId,bucketStart,bucketWidth,model,key,inputTokens,outputTokens\n"
        "vllm,req-9,,,,,12,3\n"
        "vllm,,2026-11-30T10:00:00Z,1h,qwen2.5-coder,pool:tenant-a/vllm,100,20\n"
    )
    rows = parse(csv_text, CSV)
    assert [n for n, _ in rows] == [2, 3]
    import_id = uuid.uuid4()
    lines = statement_lines(import_id, "t1", rows)
    assert lines[0].provider_request_id == "req-9" and lines[0].bucket_start is None
    assert lines[1].bucket_end == H + timedelta(hours=1)
    assert lines[1].statement_ref == f"import/{import_id}#L3"
    jsonl = (
        '{"provider": "vllm", "providerRequestId": "r1", "inputTokens": 1, "outputTokens": 2}\n'
        "\n"
        '{"provider": "vllm", "bucketStart": "2026-11-30T00:00:00+00:00", "bucketWidth": "1d",'
        ' "model": "m", "inputTokens": 5, "outputTokens": 6, "cachedInputTokens": 5}\n'
    )
    assert [n for n, _ in parse(jsonl, JSONL)] == [1, 3]
    # Cache writes, a part of the input as cache reads are, ride along for the price.
    written = (
        "provider,providerRequestId,inputTokens,outputTokens,cachedInputTokens,"
        "cacheWriteInputTokens\nvllm,req-w,100,3,40,60\n"
    )
    (line,) = statement_lines(import_id, "t1", parse(written, CSV))
    assert (line.cached_input_tokens, line.cache_write_input_tokens) == (40, 60)
    with pytest.raises(StatementFileError) as caught:
        parse(written.replace(",60", ",61"), CSV)
    assert [(e.line, e.field) for e in caught.value.errors] == [(2, "cacheWriteInputTokens")]


@pytest.mark.parametrize(
    ("text", "fmt", "line", "field"),
    [
        ("provider,inputTokens,outputTokens,prompt\nvllm,1,2,hello\n", CSV, 2, "prompt"),
        (
            "provider,providerRequestId,inputTokens,outputTokens\nvllm,r,-1,2\n",
            CSV,
            2,
            "inputTokens",
        ),
        (
            "provider,providerRequestId,inputTokens,outputTokens\nvllm,r,1.5,2\n",
            CSV,
            2,
            "inputTokens",
        ),
        ('{"provider": "vllm", "inputTokens": 1, "outputTokens": 2}\n', JSONL, 1, "bucketStart"),
        (
            '{"provider":"vllm","providerRequestId":"a","inputTokens":1,"outputTokens":1}\n'
            '{"provider":"vllm","bucketStart":"2026-11-30T10:30:00Z","bucketWidth":"1h",'
            '"model":"m","inputTokens":1,"outputTokens":1}\n',
            JSONL,
            2,
            "bucketStart",
        ),
        (
            '{"provider":"vllm","providerRequestId":"a","key":"sk-abcdefghijklmnop",'
            '"inputTokens":1,"outputTokens":1}\n',
            JSONL,
            1,
            "key",
        ),
        ('{"provider":"vllm"\n', JSONL, 1, None),
    ],
)
def test_a_bad_row_is_reported_with_its_line_and_field(
    text: str, fmt: str, line: int, field: str | None
) -> None:
    with pytest.raises(StatementFileError) as caught:
        parse(text, fmt)
    first = caught.value.errors[0]
    assert (first.line, first.field) == (line, field)


# -- health ----------------------------------------------------------------------------------
def _probed(
    provider: str,
    error: str | None,
    replayed: bool = False,
    state: DeploymentState = DeploymentState.APPROVED,
) -> tuple[ProbeTarget, ProbeResult]:
    outcome = ProbeOutcome.FAILED if error else ProbeOutcome.OK
    deployment = f"{provider}/{uuid.uuid4().hex[:4]}"
    target = ProbeTarget(
        tenant_id="t1",
        deployment_id=deployment,
        provider=provider,
        model="m",
        endpoint_ref="upstream:127.0.0.1:1",
        state=state,
    )
    result = ProbeResult(
        tenant_id="t1",
        deployment_id=deployment,
        outcome=outcome,
        error_class=error,
        replayed=replayed,
    )
    return target, result


def test_failures_to_reach_several_providers_at_once_are_taken_for_the_probers_network() -> None:
    both_gone = [_probed("openai", "connection"), _probed("anthropic", "timeout")]
    assert own_network_suspected(both_gone)
    # One provider down, however many of its deployments: that provider's outage.
    assert not own_network_suspected([_probed("openai", "connection")] * 5)
    # Answers that were bad, not missing, are the deployments' own.
    assert not own_network_suspected([_probed("openai", "server_error"), _probed("x", "auth")])
    # Most, not all: one local deployment still answering does not clear the worker's network.
    mostly = [*both_gone * 2, _probed("local", None)]
    assert own_network_suspected(mostly)
    assert not own_network_suspected([*both_gone, _probed("local", None)])
    # Results reused from an earlier run of the window say nothing of this one's network.
    reused = [_probed("openai", "connection", True), _probed("anthropic", "timeout", True)]
    assert not own_network_suspected(reused)
    assert own_network_suspected([*both_gone, _probed("local", None, replayed=True)])


def test_a_provider_already_degraded_does_not_make_a_new_outage_look_like_the_network() -> None:
    # OpenAI has been down an hour (its deployments Degraded, failing again); now Anthropic's
    # stop answering. That is Anthropic's outage: counted with OpenAI's, it was held.
    old = [_probed("openai", "connection", state=DeploymentState.DEGRADED)] * 8
    answering = _probed("mistral", None)
    assert not own_network_suspected([*old, *[_probed("anthropic", "timeout")] * 2, answering])
    # With no provider answering, it cannot be told from the worker's own network lost while
    # OpenAI is down: held, as degrading everything is the outage this rule prevents.
    assert own_network_suspected([*old, *[_probed("anthropic", "timeout")] * 2])
    # The worker's own network lost while a provider is down: still two providers unreachable.
    lost = [_probed("anthropic", "timeout"), _probed("mistral", "connection")]
    assert own_network_suspected([*old, *lost])
    # A Degraded deployment that answers is evidence of a working network, as any other.
    back = _probed("openai", None, state=DeploymentState.DEGRADED)
    assert not own_network_suspected([*lost, back, back])


def test_probe_windows_verdicts_and_latency_statistics() -> None:
    at = datetime(2026, 11, 30, 10, 3, 59, tzinfo=UTC)
    assert probe_window(at, timedelta(minutes=2)) == datetime(2026, 11, 30, 10, 2, tzinfo=UTC)
    assert probe_window(at, timedelta(minutes=1)) == datetime(2026, 11, 30, 10, 3, tzinfo=UTC)
    assert verdict(DeploymentState.APPROVED, ProbeOutcome.FAILED) is ProbeVerdict.DEGRADE
    assert verdict(DeploymentState.DEGRADED, ProbeOutcome.OK) is ProbeVerdict.RECOVER
    assert verdict(DeploymentState.DEGRADED, ProbeOutcome.FAILED) is ProbeVerdict.NONE
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile(list(range(1, 101)), 95) == 95.0
    stats = latency_stats(
        "t1", "d", [(ProbeOutcome.OK, 10), (ProbeOutcome.OK, 30), (ProbeOutcome.FAILED, 9000)]
    )
    assert (stats.latency_p50_ms, stats.latency_p95_ms, stats.latency_samples) == (10, 30, 2)
    assert (stats.probes, stats.failures) == (3, 1)
