"""The public classes' docstrings: every shared-argument placeholder filled in
(``_api/_async/_docs.py``), and every constructor argument documented once."""

from __future__ import annotations

import inspect
import re

import pytest

import tenure
from tenure._api import _async as _async_facade
from tenure._api import _sync as _sync_facade
from tenure._api._async._docs import shared_args

pytestmark = pytest.mark.once

#: The public classes of the facade, sync and async.
FACADE = [
    obj
    for name in tenure.__all__
    if inspect.isclass(obj := getattr(tenure, name))
    and obj in (getattr(_sync_facade, name, None), getattr(_async_facade, name, None))
]
assert len(FACADE) > 20, "the facade's classes are not found"
#: Those a user constructs (leases and read-write views are returned by them).
CONSTRUCTED = [cls for cls in FACADE if not cls.__name__.endswith(("Lease", "View", "Leadership"))]

PLACEHOLDER = re.compile(r"^\s*\{[a-z_]+\}\s*$", re.M)


def documented_args(cls: type) -> list[str]:
    """The argument names of the ``Args:`` section of ``cls``'s docstring, in order."""
    doc = inspect.getdoc(cls) or ""
    lines = doc.split("\nArgs:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return [m.group(1) for line in lines if (m := re.match(r"    (\w+): ", line))]


def test_the_facade_is_found() -> None:
    names = {cls.__name__ for cls in CONSTRUCTED}
    for kind in ("Lock", "FairLock", "RLock", "ReadWriteLock", "Semaphore", "CountDownLatch"):
        assert {kind, f"Async{kind}"} <= names
    some = {"MultiLock", "FencedKey", "Lease", "AsyncSemaphoreLease", "ReadWriteView"}
    assert some <= {cls.__name__ for cls in FACADE}


@pytest.mark.parametrize("cls", FACADE, ids=lambda cls: cls.__name__)
def test_no_placeholder_is_left(cls: type) -> None:
    docs = [cls.__doc__ or ""]
    docs += [member.__doc__ or "" for _, member in inspect.getmembers(cls, callable)]
    for doc in docs:
        assert not PLACEHOLDER.search(doc), doc


@pytest.mark.parametrize("cls", CONSTRUCTED, ids=lambda cls: cls.__name__)
def test_every_constructor_argument_is_documented_once(cls: type) -> None:
    args = documented_args(cls)
    assert sorted(args) == sorted(inspect.signature(cls).parameters), args


def test_shared_args_refuses_a_class_without_placeholder_or_a_stray_note() -> None:
    class Plain:
        """No placeholder."""

    with pytest.raises(ValueError, match="no shared-argument placeholder"):
        shared_args()(Plain)
    with pytest.raises(ValueError, match="no shared paragraph"):
        shared_args(colour="red")


#: A line of the error tree in ``tenure._errors``' docstring: its depth (the
#: text before the branch), the class and the builtin it also derives from.
TREE_LINE = re.compile(r"^    ([│ ]*)[├└]── (\w+)(?: \((\w+)\))?")


def test_the_drawn_error_tree_is_the_real_one() -> None:
    from tenure import _errors

    drawn: dict[str, tuple[str, str | None]] = {}
    parents = ["TenureError"]
    for line in (_errors.__doc__ or "").splitlines():
        match = TREE_LINE.match(line)
        if match is None:
            continue
        depth = len(match[1]) // 4
        del parents[depth + 1 :]
        drawn[match[2]] = (parents[depth], match[3])
        parents.append(match[2])
    errors = {
        name: cls
        for name in tenure.__all__
        if inspect.isclass(cls := getattr(tenure, name))
        and issubclass(cls, tenure.TenureError)
        and cls is not tenure.TenureError
    }
    assert set(drawn) == set(errors)
    for name, (parent, builtin) in drawn.items():
        cls = errors[name]
        assert cls.__bases__[0].__name__ == parent, name
        builtins = [b.__name__ for b in cls.__mro__ if b.__module__ == "builtins"]
        assert builtin is None or builtin in builtins, name
        assert builtin is not None or len(cls.__bases__) == 1, name  # inherits its parent's
