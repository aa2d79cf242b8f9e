"""Holder labels (`tenure._label`): pure, no server."""

from __future__ import annotations

import os

import pytest

from tenure._label import MAX_LABEL, clean_label, default_label, program_name


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/usr/bin/celery", "worker", "--concurrency=4"], "celery worker"),
        (["/srv/app/manage.py", "runserver"], "manage.py runserver"),
        (["/usr/bin/psql", "postgres://u:secret@db/x"], "psql"),
        (["/opt/pkg/__main__.py"], "pkg"),
        (["-c"], "python -c"),
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
