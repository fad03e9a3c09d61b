"""What Claude Code sends about thinking on every turn, and what this surface makes of it:
`thinking` (taken as `adaptive` or `disabled`, refused when it asks for thinking blocks this
surface can neither return nor take back), `context_management` (its `clear_thinking_*` edits
taken, as no thinking block reaches a deployment to clear) and the thinking blocks of a history
(an earlier assistant turn's left out, as Anthropic leaves them out; one in the final assistant
turn refused: thinking_left_out). Each refusal names its field, as the rest of the Messages
mapping (api/anthropic_shapes.py, api/anthropic_history.py) does."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.problems import body_refused

# The blocks of a model's thinking, as an assistant turn of a Claude model's history holds them
# (the session began on Anthropic itself, or a framework kept them).
THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})


class ThinkingParam(BaseModel):
    """`adaptive` leaves the model to think or not; `enabled` (a budget to think with) and
    `between_tools` ask it to, in blocks this gateway never answers with (check_thinking)."""

    model_config = ConfigDict(extra="allow")

    # Read as all four, so that the two refused are refused saying why (check_thinking); the schema
    # lists the two taken.
    type: Literal["disabled", "enabled", "adaptive", "between_tools"] = Field(
        json_schema_extra={"enum": ["disabled", "adaptive"]}
    )
    # Claude Code sends `adaptive` with `budget_tokens: 0`; `display` shapes thinking blocks.
    budget_tokens: int | None = Field(default=None, ge=0)
    display: Literal["summarized", "omitted"] | None = None


def check_thinking(thinking: ThinkingParam | None) -> None:
    """`adaptive` is leave to think, not a demand: the answer is given without thinking, as it
    may be. It is not passed on: the normalised request has no place for it, and an Anthropic
    deployment that thought would answer with thinking blocks, which this surface has no way
    to give, nor to take back in the next turn's history (with thinking on, Anthropic refuses
    a tool loop's history without them). `enabled` and `between_tools` ask for that thinking."""
    if thinking is None:
        return
    for name in sorted(k for k, v in (thinking.model_extra or {}).items() if v is not None):
        raise body_refused(("thinking", name), "unknown or unsupported parameter")
    if thinking.type not in ("disabled", "adaptive"):
        raise body_refused(
            ("thinking", "type"),
            "thinking cannot be returned by this gateway: send adaptive (answered without"
            " thinking) or disabled",
        )


def thinking_left_out(kind: str, loc: tuple[str | int, ...], *, final: bool) -> bool:
    """Whether an assistant turn's block is thinking to leave out of the history. Anthropic
    ignores the thinking of earlier turns (it is not part of the context), and this surface
    never enables thinking, so none is sent on: refused, every later turn of a conversation
    that began with thinking was refused too. In the final assistant turn (a prefill the model
    goes on from) it would be thinking to continue, which needs thinking enabled: refused, as
    Anthropic refuses it with thinking disabled."""
    if kind not in THINKING_BLOCKS:
        return False
    if final:
        raise body_refused(
            (*loc, "type"),
            "an assistant message in the final position cannot contain thinking: this gateway"
            " answers without thinking (earlier turns' thinking blocks are left out)",
        )
    return True


def check_context_management(config: Any) -> None:
    """Context edits: `clear_thinking_*` clears thinking blocks from the history, and none ever
    reaches a deployment (an earlier turn's are left out, the final turn's refused, and none is
    answered), so it changes nothing and is taken (Claude Code sends it on every turn). Any
    other edit (`clear_tool_uses_*`, `compact_*`) changes what the model is shown, which the
    normalised request cannot carry."""
    if config is None:
        return
    if not isinstance(config, dict):
        raise body_refused(("context_management",), "must be an object")
    for name in sorted(k for k, v in config.items() if k != "edits" and v is not None):
        raise body_refused(("context_management", name), "unknown or unsupported parameter")
    edits = config.get("edits") or []
    if not isinstance(edits, list):
        raise body_refused(("context_management", "edits"), "must be a list of edits")
    for i, edit in enumerate(edits):
        kind = edit.get("type") if isinstance(edit, dict) else None
        if not isinstance(kind, str) or not kind.startswith("clear_thinking_"):
            raise body_refused(
                ("context_management", "edits", i, "type"),
                "only clear_thinking edits can be mapped (no thinking is kept here to clear)",
            )
