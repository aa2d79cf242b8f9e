"""A CountDownLatch names who set it, on real servers: ``try_set_count`` stores
the latch's label in ``…:latch:by`` beside the count, ``info()``, ``tenure
inspect``, ``ls`` and their JSON show it while the count is not zero, and the
count-down to zero deletes it with the count (no extra command, nothing left
behind). (The pure plans and views: ``tests/test_latch_plans.py``,
``tests/test_ops.py``.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import redis
import redis.asyncio

from tenure import (
    AsyncCountDownLatch,
    CountDownLatch,
    InvalidArgument,
    PermissionDenied,
    WrongTypeError,
)
from tenure._cli import main
from tenure._label import MAX_ENCODED, MAX_LABEL, default_label, encode_label
from tenure._server import ServerProcess

LABEL = "batch-host pid 77 (scheduler)"
#: A label with a newline, a tab, separators, unicode, 10 KB long.
ODD = "line one\nline\ttwo ;|#:%+ — ünïcödé 日本 🔒 " + "x" * 10_000
COUNT = "tenure:{%s}:latch"


def by_key(name: str) -> str:
    return COUNT % name + ":by"


def keys(r: redis.Redis) -> set[str]:
    return {k.decode() for k in r.scan_iter(count=1000)}


def tenure(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    """Run ``tenure --url URL ARGS`` in-process: (exit status, stdout, stderr)."""
    status = main(["--url", url, *args])
    out, err = capsys.readouterr()
    return status, out, err


def tenure_json(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> Any:
    status, out, _ = tenure(capsys, url, *args, "--json")
    assert status == 0, out
    return json.loads(out)


def test_info_names_the_setter_until_the_count_reaches_zero(r: redis.Redis) -> None:
    latch = CountDownLatch(r, "job")
    assert latch.info().label is None  # open: nobody set it
    assert latch.try_set_count(2)
    assert latch.info().label == default_label()
    assert r.get(by_key("job")) == encode_label(default_label()).encode()
    assert r.ttl(by_key("job")) == -1  # as the count: a lapse would only hide who set it
    other = CountDownLatch(r, "job", label=LABEL)
    assert not other.try_set_count(5)  # busy: who set it is not changed
    assert other.info().label == default_label()
    assert latch.count_down() == 1 and other.info().label == default_label()
    assert latch.count_down() == 0
    info = latch.info()
    assert info.count == 0 and info.label is None
    assert keys(r) == {COUNT % "job" + ":opened"}  # the count and who set it: gone together
    assert other.try_set_count(1) and latch.info().label == LABEL  # set again, by another


def test_custom_empty_and_odd_labels(r: redis.Redis) -> None:
    named = CountDownLatch(r, "named", label=LABEL)
    assert named.try_set_count(3) and named.info().label == LABEL
    nobody = CountDownLatch(r, "nobody", label="")
    assert nobody.try_set_count(3) and nobody.info().label is None
    assert r.get(by_key("nobody")) == b""  # written all the same: no stale setter survives
    odd = CountDownLatch(r, "odd", label=ODD)
    assert odd.try_set_count(1)
    shown = odd.info().label
    assert shown is not None and shown.startswith("line one line two ;|#:%+ — ünïcödé 日本 🔒 x")
    assert len(shown) <= MAX_LABEL and shown.isprintable()
    stored = r.get(by_key("odd"))
    assert stored is not None and len(stored) <= MAX_ENCODED and stored.isascii()
    assert odd.count_down() == 0 and not r.exists(by_key("odd"))
    with pytest.raises(InvalidArgument, match="label must be a str"):
        CountDownLatch(r, "bad", label=b"x")  # type: ignore[arg-type]


def test_asyncio_latch_names_its_setter(url: str) -> None:
    async def main_() -> None:
        client = redis.asyncio.Redis.from_url(url)
        try:
            latch = AsyncCountDownLatch(client, "ajob", label=LABEL)
            assert await latch.try_set_count(2)
            assert (await latch.info()).label == LABEL
            default = AsyncCountDownLatch(client, "adefault")
            assert await default.try_set_count(1)
            assert (await default.info()).label == default_label()
            assert await default.count_down() == 0 and (await default.info()).label is None
            assert await latch.count_down() == 1 and await latch.count_down() == 0
            assert (await latch.info()).label is None
            assert not await client.exists(by_key("ajob"), by_key("adefault"))
        finally:
            await client.aclose()

    asyncio.run(main_())


def test_inspect_and_ls_show_who_set_it(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    latch = CountDownLatch(r, "batch:7", label=LABEL)
    assert latch.try_set_count(2)
    odd = CountDownLatch(r, "odd", label=ODD)
    assert odd.try_set_count(1)
    odd_shown = odd.info().label
    assert odd_shown is not None
    status, out, _ = tenure(capsys, url, "inspect", "batch:7")
    assert status == 0
    assert out.splitlines()[1:3] == ["  count    2 (closed)", f"  set by   {LABEL}"]
    status, out, _ = tenure(capsys, url, "ls")
    assert status == 0 and f"count 2, set by {LABEL}" in out
    assert f"count 1, set by {odd_shown}" in out and "\n" not in odd_shown
    assert len(out.splitlines()) == 3  # a header, one row each: the odd label broke no line
    [one] = tenure_json(capsys, url, "inspect", "batch:7")["locks"]
    assert one["kind"] == "CountDownLatch" and one["label"] == LABEL and one["holder"] is None
    listed = {lock["name"]: lock for lock in tenure_json(capsys, url, "ls")["locks"]}
    assert listed["batch:7"]["label"] == LABEL and listed["odd"]["label"] == odd_shown
    latch.count_down()
    latch.count_down()
    status, out, _ = tenure(capsys, url, "inspect", "batch:7")
    assert status == 0 and "set by" not in out and "(open)" in out
    [one] = tenure_json(capsys, url, "inspect", "batch:7")["locks"]
    assert one["label"] is None and one["open"] is True


def test_a_count_set_by_an_older_tenure_shows_no_setter(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    r.set(COUNT % "old", 2)  # an older tenure's try_set_count: the count alone
    latch = CountDownLatch(r, "old")
    assert latch.info().label is None
    status, out, _ = tenure(capsys, url, "ls")
    assert status == 0 and "count 2" in out and "set by" not in out
    assert latch.count_down() == 1 and latch.count_down() == 0
    assert keys(r) == {COUNT % "old" + ":opened"}


def test_a_by_key_of_another_type_is_a_wrong_type(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    r.rpush(by_key("job"), "x")
    latch = CountDownLatch(r, "job")
    with pytest.raises(WrongTypeError) as caught:
        latch.try_set_count(2)
    assert by_key("job") in str(caught.value)
    assert not r.exists(COUNT % "job")  # nothing written
    with pytest.raises(WrongTypeError):
        latch.info()
    status, out, err = tenure(capsys, url, "ls")
    assert status == 0 and "skipped CountDownLatch 'job'" in err and "job" not in out
    # a count set meanwhile (an older tenure): the count-down to zero deletes the
    # key with the count, as it deletes its own, unread
    r.set(COUNT % "job", 1)
    assert latch.count_down() == 0 and not r.exists(by_key("job"), COUNT % "job")


def test_a_user_who_may_not_write_the_by_key_changes_nothing(
    r: redis.Redis, server: ServerProcess
) -> None:
    """The ``by`` key is a key of the latch's scripts: a user allowed the count
    but not it is refused before anything is written."""
    name = "latch-label-user"
    rules = ("~tenure:{job}:latch", "~tenure:{job}:latch:opened", "&tenure:{job}:latch:zero")
    setuser = ("ACL", "SETUSER", name, "reset", "on", ">pw", "resetchannels", *rules, "+@all")
    r.execute_command(*setuser)  # type: ignore[no-untyped-call]
    user = redis.Redis.from_url(server.url, username=name, password="pw")
    try:
        with pytest.raises(PermissionDenied) as caught:
            CountDownLatch(user, "job").try_set_count(2)
        assert caught.value.target == by_key("job")
        assert keys(r) == set()
        assert CountDownLatch(r, "job").try_set_count(1)
        with pytest.raises(PermissionDenied):
            CountDownLatch(user, "job").count_down()
        assert r.get(COUNT % "job") == b"1" and r.exists(by_key("job"))
    finally:
        user.close()
        r.execute_command("ACL", "DELUSER", name)  # type: ignore[no-untyped-call]
