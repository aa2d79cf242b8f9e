"""Pure tests of the CountDownLatch plans and keys: canned replies and a fake clock, no Redis."""

from __future__ import annotations

from typing import Any

import pytest
from _plan_harness import Clock, finish, send
from redis.crc import key_slot

from tenure import CountDownLatchInfo, InvalidArgument
from tenure._keys import latch_keys
from tenure._label import clean_label, encode_label
from tenure._plans import latch as latch_plans
from tenure._protocol import Eval, Status, Subscribe, WaitWake
from tenure._scripts import LATCH_COUNT_DOWN, LATCH_INSPECT, LATCH_SET
from tenure._views.live import COLUMNS, HeldClock, cells, row_json

LATCH = latch_keys("job", prefix="tenure:")


def test_keys_share_a_slot() -> None:
    assert (LATCH.count, LATCH.opened, LATCH.channel, LATCH.by) == (
        "tenure:{job}:latch",
        "tenure:{job}:latch:opened",
        "tenure:{job}:latch:zero",
        "tenure:{job}:latch:by",
    )
    assert len({key_slot(k.encode()) for k in (LATCH.count, LATCH.opened, LATCH.by)}) == 1
    for name, prefix in (("", "p:"), (None, "p:"), (b"x", "p:"), ("x", None)):
        with pytest.raises(InvalidArgument):
            latch_keys(name, prefix=prefix)  # type: ignore[arg-type]


def test_latch_set_and_count_down() -> None:
    plan: Any = latch_plans.try_set_count(LATCH, 3, "web-3+pid+1")
    step = send(plan)
    assert step.script is LATCH_SET and step.keys == (LATCH.count, LATCH.by)
    assert step.args == (3, "web-3+pid+1")
    assert finish(plan, (Status.OK, 3)) is True
    plan = latch_plans.try_set_count(LATCH, 3, "")
    send(plan)
    assert finish(plan, (Status.BUSY, 1)) is False
    plan = latch_plans.count_down(LATCH)
    step = send(plan)
    assert step.script is LATCH_COUNT_DOWN
    assert step.keys == (LATCH.count, LATCH.opened, LATCH.by)  # by: deleted with the count
    assert step.args == (LATCH.channel, latch_plans.OPENED_KEEP_MS)
    assert finish(plan, (Status.OK, 2)) == 2
    for bad in (0, -2, True, "3", 2.0):
        with pytest.raises(InvalidArgument, match=r"count must be an int from 1 to 2\*\*53 - 1"):
            latch_plans.check_count(bad)


def _latch_wait(clock: Clock, timeout: float | None, count: int = 2) -> tuple[Any, Any]:
    """A wait plan that read ``count`` (opening number 5) first, and its next step."""
    plan = latch_plans.wait(LATCH, timeout, clock)
    read = send(plan)
    assert isinstance(read, Eval) and read.script is LATCH_INSPECT
    assert read.keys == (LATCH.count, LATCH.opened, LATCH.by)
    return plan, send(plan, (Status.OK, [count, 5, ""]))


def test_latch_wait_on_an_open_latch_reads_once_and_subscribes_to_nothing() -> None:
    for timeout in (None, 0.0, 2.0):
        plan = latch_plans.wait(LATCH, timeout, Clock())
        read = send(plan)
        assert isinstance(read, Eval) and read.script is LATCH_INSPECT
        assert finish(plan, (Status.OK, [0, 5, ""])) is True


def test_latch_wait_subscribes_then_reads_again() -> None:
    plan, sub = _latch_wait(Clock(), None)
    assert sub == Subscribe(LATCH.channel, None)
    read = send(plan, True)
    assert isinstance(read, Eval) and read.script is LATCH_INSPECT
    # opened before the subscription was confirmed (its message unheard)
    assert finish(plan, (Status.OK, [0, 6, ""])) is True
    plan, _ = _latch_wait(Clock(), None)
    send(plan, True)
    assert finish(plan, (Status.OK, [3, 6, ""])) is True  # opened (5 -> 6), then set to 3


def test_latch_wait_until_zero_without_polling() -> None:
    clock = Clock()
    plan, _ = _latch_wait(clock, None)
    assert isinstance(send(plan, True), Eval)  # subscribed: read again
    wait = send(plan, (Status.OK, [2, 5, ""]))
    assert wait == WaitWake(None)  # no timer: only a message (or a reconnection) wakes it
    assert isinstance(send(plan, True), Eval)
    assert send(plan, (Status.OK, [1, 5, ""])) == WaitWake(None)  # woken, not zero: wait again
    send(plan, True)
    assert finish(plan, (Status.OK, [0, 5, ""])) is True


def test_latch_wait_sees_an_opening_that_was_followed_by_a_new_count() -> None:
    plan, _ = _latch_wait(Clock(), None)
    send(plan, True)
    send(plan, (Status.OK, [2, 5, ""]))
    send(plan, True)
    assert finish(plan, (Status.OK, [4, 6, ""])) is True  # opened (5 -> 6), then set to 4


def test_latch_wait_timeout() -> None:
    clock = Clock()
    plan, sub = _latch_wait(clock, 2.0)
    assert sub == Subscribe(LATCH.channel, 2.0)
    send(plan, True)
    assert send(plan, (Status.OK, [2, 5, ""])) == WaitWake(2.0)
    clock.t += 0.5
    send(plan, True)
    assert send(plan, (Status.OK, [1, 5, ""])) == WaitWake(1.5)
    clock.t += 1.5
    last = send(plan, False)  # timed out: one last read decides
    assert isinstance(last, Eval)
    assert finish(plan, (Status.OK, [1, 5, ""])) is False
    plan, _ = _latch_wait(clock, 2.0)
    send(plan, True)
    send(plan, (Status.OK, [1, 5, ""]))
    send(plan, False)
    assert finish(plan, (Status.OK, [0, 6, ""])) is True  # opened just before the deadline


def test_latch_wait_without_time_left_reads_once_and_subscribes_to_nothing() -> None:
    plan = latch_plans.wait(LATCH, 0.0, Clock())
    send(plan)
    assert finish(plan, (Status.OK, [1, 5, ""])) is False
    clock = Clock()
    plan = latch_plans.wait(LATCH, 1.0, clock)
    send(plan)
    clock.t += 1.0  # (the read took the whole timeout)
    assert finish(plan, (Status.OK, [1, 5, ""])) is False


def test_latch_wait_unconfirmed_subscription_reads_once_more() -> None:
    clock = Clock()
    plan, sub = _latch_wait(clock, 0.5)
    assert sub == Subscribe(LATCH.channel, 0.5)
    clock.t += 0.5
    read = send(plan, False)  # the timeout ran out before the subscription was confirmed
    assert isinstance(read, Eval) and read.script is LATCH_INSPECT
    assert finish(plan, (Status.OK, [1, 5, ""])) is False
    plan, _ = _latch_wait(clock, 0.5)
    send(plan, False)
    assert finish(plan, (Status.OK, [0, 6, ""])) is True


def _inspect(reply: list[Any]) -> Any:
    plan = latch_plans.inspect(LATCH)
    step = send(plan)
    assert step.script is LATCH_INSPECT and step.keys == (LATCH.count, LATCH.opened, LATCH.by)
    return finish(plan, (Status.OK, reply))


def test_inspect_names_who_set_the_count_while_it_is_not_zero() -> None:
    by = encode_label("web-3 pid 4711 (celery worker)")
    info = _inspect([2, 5, by.encode()])
    assert info == CountDownLatchInfo("job", 2, 5, "web-3 pid 4711 (celery worker)")
    assert _inspect([2, 5, by]).label == "web-3 pid 4711 (celery worker)"  # (a decoding client)
    assert _inspect([0, 5, by]).label is None  # open: whatever is left names nobody
    assert _inspect([2, 5, ""]).label is None  # set by an older tenure, or with label=""
    odd = "büro\n🔒 50%+x;|#:" + "y" * 10_000
    info = _inspect([1, 0, encode_label(odd)])
    assert info.label == clean_label(odd) and "\n" not in info.label
    # a value another client wrote: not an encoded label (or no UTF-8), no label
    for foreign in (b"not a label", b"\xff\xfe", b"a;b"):
        assert _inspect([1, 0, foreign]).label is None


def test_top_and_the_dashboard_show_who_set_a_closed_latch() -> None:
    plan: Any = latch_plans.LATCH.read(LATCH, 0)
    send(plan)
    view = finish(plan, (Status.OK, [3, 5, encode_label("web-3 pid 4711 (celery worker)")]))
    (row,) = HeldClock().rows([view], 1_800_000_000.0)
    assert row.active and not view.held
    shown = dict(zip(COLUMNS, cells(row), strict=True))
    assert shown["HOLDER"] == "count 3, set by web-3 pid 4711 (celery worker)"
    assert shown["HELD FOR"] == shown["TTL"] == shown["WAITERS"] == "-"
    assert row_json(row)["label"] == "web-3 pid 4711 (celery worker)"
    plan = latch_plans.LATCH.read(LATCH, 0)
    send(plan)
    (row,) = HeldClock().rows([finish(plan, (Status.OK, [0, 6, ""]))], 1_800_000_000.0)
    assert not row.active and cells(row)[-1] == "open" and row_json(row)["label"] is None
