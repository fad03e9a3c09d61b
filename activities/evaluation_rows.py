"""What an evaluation reads of the store's rows, and what it makes of one that does not read as
its record (written before a rule was tightened, or by hand): the deployment's row, refused as
a reason that names its fields only (never the stored values), and the profiles listing it, a
shortfall naming each one that does not read."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.evaluation_refusals import CANNOT_RUN
from domain.approval import Refusal
from domain.deployments import LicenseMetadata
from domain.profiles import ModelProfile
from store.tables import ModelDeploymentRow, ModelProfileRow
from store.views import deployment_record

log = logging.getLogger("model_router.evaluation")

# A listing profile whose stored row does not read, named in the evaluation's shortfalls.
PROFILE_UNREADABLE = "profile-unreadable"


def readable(row: ModelDeploymentRow) -> ModelDeploymentRow:
    """The deployment's row, when it reads as its record; otherwise CannotRun naming the fields
    that do not, never their stored values (a hand-written row may hold anything). Not read
    here, every case went to the provider and the import then refused the row, the run Failed
    with pydantic's message, the stored values in it, as its reason."""
    try:
        deployment_record(row)
    except ValidationError as exc:
        raise ApplicationError(
            f"the deployment's stored record does not read ({_fields(exc)}): correct the row, "
            "then evaluate again",
            type=CANNOT_RUN,
            non_retryable=True,
        ) from None
    return row


def _fields(exc: ValidationError) -> str:
    """The row's fields an error is about. The license is read as a model of its own, whose
    errors are located by the stored keys (an unknown one is a stored value): its column is
    named instead."""
    if exc.title == LicenseMetadata.__name__:
        return "license_metadata"
    return ", ".join(sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]})) or exc.title


def listing_of(
    rows: Sequence[ModelProfileRow], deployment_id: str
) -> tuple[list[ModelProfile], list[Refusal]]:
    """The active profiles listing the deployment that read, and a shortfall naming each one
    that does not (by id and version, never its values), as the routing snapshot leaves such
    a profile out (store/catalog_loader.py). Read regardless, its ValidationError failed the
    record step after the evidence was imported, retried for half an hour, then the run
    Failed beside a deployment Evaluated on that evidence."""
    listing: list[ModelProfile] = []
    unreadable: list[Refusal] = []
    for row in rows:
        if deployment_id not in (row.allowed_deployments or []):
            continue
        try:
            listing.append(ModelProfile.model_validate(row))
        except ValidationError:
            log.warning(
                "profile %s version %s does not read: its thresholds are not checked",
                row.profile_id,
                row.version,
            )
            unreadable.append(
                Refusal(
                    code=PROFILE_UNREADABLE,
                    message=f"profile {row.profile_id} v{row.version}'s stored record does not "
                    "read as this version reads it: its thresholds were not checked; correct "
                    "the row",
                    profile_id=row.profile_id,
                )
            )
    return listing, unreadable
