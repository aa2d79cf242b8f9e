"""Holder labels (`tenure._label`): pure, no server."""

from __future__ import annotations

import os

import pytest

from tenure._info import (
    CountDownLatchInfo,
    LockInfo,
    ReadWriteHolder,
    ReadWriteInfo,
    SemaphoreHolder,
    SemaphoreInfo,
    held_by,
)
from tenure._label import (
    MAX_ENCODED,
    MAX_LABEL,
    clean_label,
    command_words,
    decode_label,
    default_label,
    default_suffix,
    holder_label,
    holder_text,
    label_suffix,
    program_name,
    run_label,
    split_holder,
)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/usr/bin/celery", "worker", "--concurrency=4"], "celery worker"),
        (["/srv/app/manage.py", "runserver"], "manage.py runserver"),
        (["/usr/bin/psql", "postgres://u:secret@db/x"], "psql"),
        (["/opt/pkg/__main__.py"], "pkg"),
        (["-c"], "python -c"),
        (["-"], "python -"),
        ([], "python"),
    ],
)
def test_program_name_keeps_the_name_and_a_plain_first_word(argv: list[str], expected: str) -> None:
    assert program_name(argv) == expected


def test_the_default_label_names_this_process() -> None:
    label = default_label()
    assert f"pid {os.getpid()} (" in label
    assert len(label) <= MAX_LABEL


def test_a_label_is_cleaned_and_cut() -> None:
    assert clean_label("web\n3\x00 job") == "web 3  job"
    assert len(clean_label("x" * 500)) == MAX_LABEL
    with pytest.raises(TypeError, match="not int: 5"):
        clean_label(5)  # type: ignore[arg-type]


# --- a label inside a token -----------------------------------------------------------------

ODD = "a b:c.d;e|f#g%h+i~j\nk\tl\x00m — ünïcödé 日本 🔒 (x) [y] @z,/=" + "é" * 300


@pytest.mark.parametrize("label", ["web-3 pid 4711 (celery worker)", "a+b%20c", ODD, " "])
def test_a_label_goes_into_a_token_and_comes_back(label: str) -> None:
    suffix = label_suffix(label)
    encoded = suffix[1:]
    assert len(encoded) <= MAX_ENCODED
    # never a character a script or a plan splits a stored value on
    assert not set(encoded) & set(":|#; \t\n\r\x00") and encoded.isascii()
    token = "d400d3580b287d66811ef6dacb4ca7c7.1:283ed9d4283ed9d4283ed9d4283ed9d4"
    bare, back = split_holder(token + suffix)
    if not clean_label(label):
        assert suffix == "" and (bare, back) == (token, None) and decode_label(encoded) is None
        return
    assert bare == token and back is not None and clean_label(label).startswith(back)
    assert decode_label(encoded) == back  # alone, as a latch's by key holds it
    assert back == clean_label(label) or len(encoded) > MAX_ENCODED - 12
    assert holder_label("ab12.3" + suffix) == back  # an RLock's field
    assert holder_label("9f00aa11bb22cc33" + suffix) == back  # a ReadWriteLock hold's id


def test_a_value_without_a_label_is_shown_whole() -> None:
    old = "d400d3580b287d66811ef6dacb4ca7c7.1:283ed9d4"
    assert split_holder(old) == (old, None) and holder_text(old) == old
    for foreign in ("job-42;b", "uuid-like;x", "ab12.3;bad label", "ab12.3;%zz;"):
        assert holder_label(foreign) is None, foreign
    for foreign in ("bad label", "%zz;", "a|b", ""):
        assert decode_label(foreign) is None, foreign
    assert holder_label("") is None and holder_label(None) is None
    with_label = old + label_suffix("web-3 pid 1 (x)")
    assert holder_text(with_label) == f"web-3 pid 1 (x) [{old}]"
    assert holder_text(with_label, short=True) == "web-3 pid 1 (x)"
    assert holder_text("ab12.3", "given") == "given [ab12.3]"
    assert label_suffix("") == "" and label_suffix(None) == default_suffix()
    with pytest.raises(TypeError):
        label_suffix(b"x")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        (
            ["/usr/bin/python3", "manage.py", "send_report", "--db=x"],
            "python3 manage.py send_report",
        ),
        (["psql", "postgres://u:secret@db/x"], "psql"),
        (["backup.sh", "--password", "hunter2"], "backup.sh"),
        (["make", "a", "b", "c", "d"], "make a b"),
        ([], ""),
    ],
)
def test_tenure_runs_label_keeps_plain_words_of_the_command(
    command: list[str], expected: str
) -> None:
    assert command_words(command) == expected
    label = run_label(command)
    assert label.endswith(f"pid {os.getpid()} (tenure run: {expected})"[:MAX_LABEL])
    assert "secret" not in label and "hunter2" not in label


def test_held_by_names_the_first_holder() -> None:
    assert held_by(LockInfo("n", None, 0, None, 0, 0)) == "free"
    info = LockInfo("n", "ab.1:cd", 1, 12.44, 5, 0, label="web-3 pid 4711 (celery worker)")
    assert held_by(info) == "held by web-3 pid 4711 (celery worker), lease left 12.4 s"
    assert held_by(LockInfo("n", "ab.1:cd", 1, None, 5, 0)) == "held by ab.1:cd, no expiry"
    rw = ReadWriteInfo(
        "n",
        "read",
        (
            ReadWriteHolder("a.1", "read", 1, 3.0, 7, label="reader"),
            ReadWriteHolder("b.2", "write", 1, 9.0, 7),
        ),
        0,
        0,
        7,
    )
    assert held_by(rw) == "held by b.2 (write) and 1 more, lease left 9.0 s"
    sem = SemaphoreInfo("n", 2, 1, (SemaphoreHolder("t", 1, 1.0, label="job"),), 0)
    assert held_by(sem) == "held by job, lease left 1.0 s"
    assert held_by(CountDownLatchInfo("n", 1, 0)) is None
