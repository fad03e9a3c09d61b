"""The lead of answers over their workflows' starts (activities/answers_ahead.py): an answer
goes at once while fewer than the limit are ahead, a place frees when its start is answered
(accepted or refused), and with no place free an answer waits for its own start."""

from __future__ import annotations

import asyncio

from activities.answers_ahead import AnswersAhead


async def test_answers_go_ahead_of_their_starts_up_to_the_limit() -> None:
    loop = asyncio.get_running_loop()
    ahead = AnswersAhead(2)
    starts = [loop.create_future() for _ in range(3)]
    assert ahead.take(starts[0]) and ahead.take(starts[1])
    assert not ahead.take(starts[2])  # two ahead already: this one waits for its start
    assert ahead.ahead == 2


async def test_a_place_frees_when_its_start_is_answered_either_way() -> None:
    loop = asyncio.get_running_loop()
    ahead = AnswersAhead(1)
    accepted, refused, later = (loop.create_future() for _ in range(3))
    assert ahead.take(accepted)
    assert not ahead.take(later)
    accepted.set_result(True)
    await asyncio.sleep(0)  # a future's callbacks run on the loop's next turn
    assert ahead.ahead == 0
    assert ahead.take(refused)
    refused.set_result(False)
    await asyncio.sleep(0)
    assert ahead.ahead == 0 and ahead.take(later)


async def test_an_answered_start_or_none_never_holds_a_place() -> None:
    loop = asyncio.get_running_loop()
    ahead = AnswersAhead(0)  # no lead: every answer waits for an unanswered start
    answered: asyncio.Future[bool] = loop.create_future()
    answered.set_result(True)
    assert ahead.take(None)  # the call began after its start returned
    assert ahead.take(answered)
    assert not ahead.take(loop.create_future())
    assert ahead.ahead == 0
