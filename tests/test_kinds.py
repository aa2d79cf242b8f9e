"""The registry of kinds is complete: every kind of the key schema, every public
primitive and every ``release`` flag has one registered descriptor, which reads
its keys. Forgetting to register a kind makes these fail (rather than making
its keys silently invisible to ``tenure ls``). No server."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import Any

import pytest

import tenure
from tenure import _cli, _doctor, _keys
from tenure._drivers._hubbook import PassOn
from tenure._errors import WrongTypeError
from tenure._keys import LatchKeys, LockKeys, parse_key
from tenure._plans.kind import Kind
from tenure._plans.kinds import KINDS, by_name, kind_of, of_keys
from tenure._plans.lock import LOCK
from tenure._plans.rlock import RLOCK
from tenure._plans.snapshot import Hold, LockView
from tenure._protocol import Command, Eval, Status
from tenure._scripts import LOCK_RELEASE
from tenure._views import VIEWS, view_of

pytestmark = pytest.mark.once

#: Public classes with an ``info()`` that are no kind of their own: a MultiLock
#: is made of registered kinds' locks.
NOT_KINDS = {"MultiLock"}

NAMES = ("orders:42", "a{b}%c", "x")


def names() -> tuple[str, ...]:
    """The public names of every registered kind, in the registry's order."""
    return tuple(kind.name for kind in KINDS)


PREFIXES = ("tenure:", "app:{x}:")


def key_strings(keys: LockKeys | LatchKeys) -> dict[str, str]:
    """Every key of ``keys`` by field name (not the wake prefix or channel; a
    ReadWriteLock's ``released``: one owner's last-op key)."""
    out = {
        f.name: getattr(keys, f.name)
        for f in dataclasses.fields(keys)
        if f.name not in ("name", "wake_prefix", "channel") and getattr(keys, f.name)
    }
    if isinstance(keys, _keys.RWLockKeys):  # ``released`` is the prefix of the op keys
        out["released"] = keys.last_op("owner.1")
    return out


def test_every_kind_of_the_key_schema_is_registered() -> None:
    assert set(names()) == set(_keys.MARKERS)
    assert set(_keys.ROLES) - set(names()) == {"FencedKey"}  # a resource, not a primitive
    assert len(set(names())) == len(KINDS)
    for kind in KINDS:
        assert by_name(kind.name) is kind
        assert kind.marker == _keys.MARKERS[kind.name]
        assert kind.roles == _keys.ROLES[kind.name]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_key_of_a_kind_parses_back_to_it(kind: Kind[Any]) -> None:
    seen: set[str] = set()
    for name in NAMES:
        for prefix in PREFIXES:
            keys = kind.keys(name, prefix=prefix)
            assert of_keys(keys) is kind
            for role, key in key_strings(keys).items():
                info = parse_key(key)
                assert info is not None, (kind.name, role, key)
                assert (info.kind, info.name, info.prefix) == (kind.name, name, prefix)
                seen.add(info.role)
    if kind.exact_key:
        for key in ("orders:42", "app:{user:1}:lock", "}x{"):
            keys = kind.keys(None, key=key, prefix="tenure:")
            assert of_keys(keys) is kind
            for role, derived in key_strings(keys).items():
                if derived == key:
                    continue  # the user's own key
                info = parse_key(derived)
                assert info is not None and info.kind == kind.name, (role, derived)
                assert info.key == key
                seen.add(info.role)
    # every role of the schema is a key the kind's builder makes
    assert kind.roles <= seen
    assert "lock" in seen


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_reads_its_main_key(kind: Kind[Any]) -> None:
    keys = kind.keys("orders", prefix="tenure:")
    plan = kind.read(keys, 10)
    step = next(plan)
    assert isinstance(step, Eval | Command)
    touched = step.keys if isinstance(step, Eval) else step.args
    main_key = key_strings(keys).get("lock", key_strings(keys).get("count"))
    assert main_key in touched
    assert kind.acl_keys(keys)[0] == main_key
    plan.close()


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_describes_a_snapshot_of_itself(kind: Kind[Any]) -> None:
    view = view_of(kind.name)
    assert kind.scripts
    assert kind.releasable == (kind.force_release is not None)
    assert (view.release_flag is None) <= kind.releasable  # only the default kind has none
    assert view.instead or kind.releasable


def test_every_kind_has_one_view_in_the_same_order() -> None:
    assert [v.name for v in VIEWS] == list(names())
    assert len({v.option for v in VIEWS}) == len(VIEWS)


def test_one_kind_is_the_default_of_release() -> None:
    defaults = [k for k in KINDS if view_of(k.name).release_flag is None]
    assert [k.name for k in defaults] == [_cli.DEFAULT_RELEASE] == ["Lock"]


def _release_flags() -> dict[str, str]:
    parser = _cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    release = commands.choices["release"]
    return {
        a.const: a.option_strings[0]
        for a in release._actions
        if isinstance(a, argparse._StoreConstAction) and a.dest == "kind"
    }


def test_the_clis_release_flags_come_from_the_registry() -> None:
    flags = {v.name: v.release_flag for v in VIEWS if v.release_flag is not None}
    assert _release_flags() == flags
    assert {k: f for k, f in flags.items() if by_name(k).releasable} == _cli.RELEASE_FLAGS


def test_the_doctors_kinds_come_from_the_registry() -> None:
    assert {v.option: v.name for v in VIEWS}.items() <= _doctor.KIND_NAMES.items()
    assert set(_doctor.KIND_NAMES.values()) == set(names()) | {"FencedKey"}
    for kind in KINDS:
        assert _doctor.KIND_SCRIPTS[kind.name] == kind.scripts


def test_every_public_primitive_is_a_registered_kind() -> None:
    primitives = {
        name.removeprefix("Async")
        for name in tenure.__all__
        if inspect.isclass(getattr(tenure, name)) and hasattr(getattr(tenure, name), "info")
    }
    assert primitives - NOT_KINDS == set(names())


def test_a_snapshot_finds_its_kind() -> None:
    for kind in KINDS:
        view = LockView(kind.name, "n", "k", "", 0, -2, 0, 0)
        assert kind_of(view) is kind


def test_a_forced_release_takes_a_hold_gone_meanwhile_as_gone() -> None:
    """The forced-release plans end each hold with the kind's normal release
    plan; a NotOwnedError raised inside that sub-plan counts the hold as gone,
    and the next hold is still released."""
    keys = LOCK.keys("orders", prefix="tenure:")
    holds = [Hold("t1", 1, 5.0, 11), Hold("t2", 1, 5.0, 12)]
    view = LockView("Lock", "orders", keys.lock, "t1", 1, 5000, 12, 0)
    assert LOCK.force_release is not None
    plan = LOCK.force_release(keys, view, holds, str)
    first = next(plan)
    assert isinstance(first, Eval) and first.args[0] == "t1"
    second = plan.send((Status.NOT_OWNED, 0))
    assert isinstance(second, Eval) and second.args[0] == "t2"
    with pytest.raises(StopIteration) as stop:
        plan.send((Status.OK, 0))
    assert stop.value.value == ([holds[1]], [holds[0]])


def test_a_forced_release_of_an_rlock_counts_a_level_released_first() -> None:
    keys = RLOCK.keys("jobs", prefix="tenure:")
    hold = Hold("own.1", 2, 5.0, 7)
    view = LockView("RLock", "jobs", keys.lock, "own.1", 2, 5000, 7, 0)
    assert RLOCK.force_release is not None
    plan = RLOCK.force_release(keys, view, [hold], str)
    next(plan)
    plan.send((Status.OK, 1))  # one level left
    with pytest.raises(StopIteration) as stop:
        plan.send((Status.NOT_OWNED, 0))  # it ended meanwhile
    assert stop.value.value == ([hold], [])


def test_a_forced_release_lets_other_errors_through() -> None:
    keys = LOCK.keys("orders", prefix="tenure:")
    assert LOCK.force_release is not None
    view = LockView("Lock", "orders", keys.lock, "t1", 1, 5000, 12, 0)
    plan = LOCK.force_release(keys, view, [Hold("t1", 1, 5.0, 12)], str)
    next(plan)
    with pytest.raises(WrongTypeError):
        plan.throw(WrongTypeError(keys.lock))  # as the driver throws a step's error in


@pytest.mark.parametrize("kind", [k for k in KINDS if view_of(k.name).queued], ids=lambda k: k.name)
def test_the_hub_passes_a_hand_off_on_with_its_kinds_plan(kind: Kind[Any]) -> None:
    keys = kind.keys("orders", prefix="tenure:")
    plan = PassOn(keys, "own.1:tok").plan()
    if kind.pass_on is None:  # its waiters give such a hand-off back themselves
        with pytest.raises(StopIteration):
            next(plan)
        return
    step = next(plan)
    want = next(kind.pass_on(keys, "own.1:tok"))
    assert isinstance(step, Eval) and isinstance(want, Eval)
    assert (step.script, step.keys, step.args) == (want.script, want.keys, want.args)
    assert "own.1:tok" in step.args


def test_the_hub_passes_an_exact_key_locks_hand_off_on_as_a_lock() -> None:
    keys = LOCK.keys(None, key="app:{user:1}:lock", prefix="tenure:")
    step = next(PassOn(keys, "own.1:tok").plan())
    assert isinstance(step, Eval) and step.script is LOCK_RELEASE and step.keys[0] == keys.lock
