"""Everything about a (tenant, profile) pair that does not depend on the request, worked out
once per snapshot so a decision only runs the request-dependent filters and the arithmetic.

Columns are lists indexed by preference index (position in the profile's deduplicated
allowedDeployments), which keeps the per-decision loops to list indexing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from typing import Any

from domain.catalog import CapabilityScore, CatalogDeployment, PoolState
from domain.enums import DeploymentState, PrivacyClass
from domain.exclusions import ExclusionCode
from domain.pricing import Pricebook, dearest_input_usd_per_mtok
from domain.profiles import ModelProfile
from domain.scoring import NEUTRAL, UNKNOWN, Weights, capability_term, cost_log

# (preference index, code, detail): the raw form of an exclusion, formatted only when read.
RawExclusion = tuple[int, ExclusionCode, dict[str, Any]]
PolicyKey = tuple[PrivacyClass, str, str]  # privacy class, provider, region
MEMO_LIMIT = 256


@dataclass(frozen=True, slots=True)
class CompiledDeployment:
    """A deployment with its evidence, statistics and request-independent verdicts attached."""

    record: CatalogDeployment
    capabilities: dict[str, CapabilityScore]
    latency_log: float  # log2 of p95 ms, or UNKNOWN
    history: float
    # Lifecycle and pool refusal, the same for every profile and request.
    lifecycle: tuple[ExclusionCode, dict[str, Any]] | None


def lifecycle_exclusion(
    d: CatalogDeployment, pool_state: PoolState | None
) -> tuple[ExclusionCode, dict[str, Any]] | None:
    if d.state is DeploymentState.DEGRADED or (
        d.state is DeploymentState.APPROVED and not d.healthy
    ):
        return ExclusionCode.UNHEALTHY, {"state": d.state.value, "healthy": d.healthy}
    if d.state is not DeploymentState.APPROVED:
        return ExclusionCode.NOT_APPROVED, {"state": d.state.value, "healthy": d.healthy}
    # A pool with no reported status is served: ComputePoolService is a degrade-mode dependency,
    # and the deployment's own health probe still guards reachability.
    if pool_state is PoolState.DRAINING:
        return ExclusionCode.POOL_DRAINING, {"computePoolId": d.compute_pool_id}
    if pool_state is PoolState.OFFLINE:
        return ExclusionCode.POOL_OFFLINE, {"computePoolId": d.compute_pool_id}
    return None


def capability_exclusion(
    ev: CapabilityScore | None, capability: str, threshold: float, required_by: str
) -> tuple[ExclusionCode, dict[str, Any]] | None:
    """`required_by` is "profile" or "request" (tools or structured output it asked for)."""
    if ev is None:
        return ExclusionCode.CAPABILITY_UNMEASURED, {
            "capability": capability,
            "threshold": threshold,
            "measured": None,
            "requiredBy": required_by,
        }
    if ev.meets(threshold):
        return None
    return ExclusionCode.CAPABILITY_BELOW_THRESHOLD, {
        "capability": capability,
        "threshold": threshold,
        "measured": ev.measured,
        "verdict": ev.verdict,
        "requiredBy": required_by,
    }


def context_exclusion(
    window: int | None, required: int
) -> tuple[ExclusionCode, dict[str, Any]] | None:
    if window is None:
        return ExclusionCode.CONTEXT_WINDOW_UNKNOWN, {
            "contextWindowTokens": None,
            "requiredTokens": required,
        }
    if window < required:
        return ExclusionCode.CONTEXT_WINDOW_TOO_SMALL, {
            "contextWindowTokens": window,
            "requiredTokens": required,
        }
    return None


class Cohort:
    __slots__ = (
        "cap_mean",
        "entries",
        "epoch_cost_logs",
        "epoch_starts",
        "fingerprint",
        "history",
        "ids",
        "key_index",
        "keys",
        "latency_log",
        "members",
        "memo",
        "post",
        "pre_excluded",
        "pricing_revision",
        "profile",
        "thresholds",
        "unpriced",
    )

    def __init__(
        self,
        profile: ModelProfile,
        resolve: Callable[[str], CompiledDeployment | None],
        pricebook: Pricebook | None,
    ) -> None:
        self.profile = profile
        # Results of pure functions of this cohort and small keys (a tenant's compiled policy, a
        # data classification, scoring weights), so filling it changes no answer.
        self.memo: dict[tuple[Any, ...], Any] = {}
        # Names the profile's content in decision ids, so two drafts sharing an id and version
        # never share a decision id.
        self.fingerprint = hashlib.sha256(profile.model_dump_json().encode()).hexdigest()
        self.ids: list[str] = list(dict.fromkeys(profile.allowed_deployments))
        self.entries: list[CompiledDeployment | None] = [resolve(i) for i in self.ids]
        # Sorted so the reported failing capability does not depend on the profile's key order.
        self.thresholds: tuple[tuple[str, float], ...] = tuple(
            sorted((c, float(t)) for c, t in profile.required_capabilities.items())
        )
        self.pricing_revision = pricebook.revision if pricebook else None
        self.pre_excluded: list[RawExclusion] = []
        self.members: list[int] = []
        self.keys: list[PolicyKey] = []
        n = len(self.ids)
        self.key_index: list[int] = [-1] * n
        self.post: list[tuple[ExclusionCode, dict[str, Any]] | None] = [None] * n
        self.cap_mean: list[float] = [NEUTRAL] * n
        self.history: list[float] = [NEUTRAL] * n
        self.latency_log: list[float] = [UNKNOWN] * n
        key_of: dict[PolicyKey, int] = {}
        floor = profile.privacy_class
        regions = frozenset(profile.allowed_regions)
        for i, e in enumerate(self.entries):
            if e is None:
                self.pre_excluded.append((i, ExclusionCode.NOT_IN_CATALOG, {}))
                continue
            d = e.record
            if e.lifecycle is not None:
                self.pre_excluded.append((i, *e.lifecycle))
                continue
            if not d.privacy_class.at_least_as_strict_as(floor):
                self.pre_excluded.append(
                    (
                        i,
                        ExclusionCode.PRIVACY_BELOW_PROFILE,
                        {"privacyClass": d.privacy_class.value, "profilePrivacyClass": floor.value},
                    )
                )
                continue
            key = (d.privacy_class, d.provider, d.region)
            self.key_index[i] = key_of.setdefault(key, len(key_of))
            self.members.append(i)
            self.post[i] = self._post_exclusion(e, regions)
            measured = [
                e.capabilities[c].measured for c, _ in self.thresholds if c in e.capabilities
            ]
            self.cap_mean[i] = capability_term(measured)
            self.history[i] = e.history
            self.latency_log[i] = e.latency_log
        self.keys = list(key_of)
        self.epoch_starts, self.epoch_cost_logs = self._price_epochs(pricebook)
        self.unpriced: list[float] = [UNKNOWN] * n

    def standing(self) -> dict[str, tuple[ExclusionCode, dict[str, Any]]]:
        """Each listed deployment the profile's plans leave out whatever the call: its state,
        its pool, the profile's privacy floor, regions, thresholds and context (the filters
        worked out here); the tenant policy, the call's data, needs and budget decide the rest.
        First failure only, as a decision reports it."""
        out = {self.ids[i]: (code, detail) for i, code, detail in self.pre_excluded}
        for i in self.members:
            if (post := self.post[i]) is not None:
                out[self.ids[i]] = post
        return out

    def costs_at(self, epoch: int) -> list[float]:
        return self.epoch_cost_logs[epoch] if epoch >= 0 else self.unpriced

    def base_scores(self, weights: Weights, epoch: int) -> list[float]:
        """The part of each member's score that does not depend on which deployments survive:
        weighted capability and history, plus the NEUTRAL term for a missing latency or price.
        The planner adds the cost and latency log-ratios to the survivors' best."""
        key = ("base", weights, epoch)
        found = self.memo.get(key)
        if found is not None:
            return found
        wc, wk, wl, wh = weights.as_tuple()
        costs = self.costs_at(epoch)
        base = [
            wc * cap
            + wh * hist
            + (wk * NEUTRAL if cost == UNKNOWN else 0.0)
            + (wl * NEUTRAL if lat == UNKNOWN else 0.0)
            for cap, hist, cost, lat in zip(
                self.cap_mean, self.history, costs, self.latency_log, strict=True
            )
        ]
        if len(self.memo) < MEMO_LIMIT:  # callers choose weights; keep a bound on what we hold
            self.memo[key] = base
        return base

    def _post_exclusion(
        self, e: CompiledDeployment, regions: frozenset[str]
    ) -> tuple[ExclusionCode, dict[str, Any]] | None:
        d = e.record
        # An empty allowedRegions list places no regional restriction; tenant policy may.
        if regions and d.region not in regions:
            return ExclusionCode.REGION_NOT_IN_PROFILE, {
                "region": d.region,
                "allowedRegions": sorted(regions),
            }
        for cap, thr in self.thresholds:
            found = capability_exclusion(e.capabilities.get(cap), cap, thr, "profile")
            if found is not None:
                return found
        return context_exclusion(d.context_window_tokens, self.profile.max_context_tokens)

    def _member_records(self) -> list[CatalogDeployment]:
        return [e.record for i in self.members if (e := self.entries[i]) is not None]

    def _price_epochs(self, pricebook: Pricebook | None) -> tuple[list[int], list[list[float]]]:
        """Log2 of the profile's worst-case request cost per member, for each interval between
        price changes, so a decision finds its prices with one bisect on the date."""
        if pricebook is None:
            return [], []
        models = {(r.provider, r.model) for r in self._member_records()}
        starts = sorted(
            {p.effective_from.toordinal() for pm in models for p in pricebook.history(*pm)}
        )
        # The profile's worst-case request, as pricing.worst_case_cost_usd prices one: the whole
        # context as input (at the dearer of input and a cache write), the full output
        # allowance, no cache hits.
        inp = self.profile.max_context_tokens
        out = self.profile.max_output_tokens
        per_epoch: list[list[float]] = []
        for start in starts:
            on = date.fromordinal(start)
            logs: list[float] = [UNKNOWN] * len(self.ids)
            for i in self.members:
                e = self.entries[i]
                assert e is not None
                p = pricebook.price_for(e.record.provider, e.record.model, on)
                if p is not None:
                    usd = (
                        inp * float(dearest_input_usd_per_mtok(p))
                        + out * float(p.output_usd_per_mtok)
                    ) / 1e6
                    logs[i] = cost_log(usd)
            per_epoch.append(logs)
        return starts, per_epoch
