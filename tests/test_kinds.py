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
from tenure._keys import LatchKeys, LockKeys, parse_key
from tenure._plans.kind import Kind, LockView
from tenure._plans.kinds import KINDS, by_name, names, of_keys
from tenure._protocol import Command, Eval

pytestmark = pytest.mark.once

#: Public classes with an ``info()`` that are no kind of their own: a MultiLock
#: is made of registered kinds' locks.
NOT_KINDS = {"MultiLock"}

NAMES = ("orders:42", "a{b}%c", "x")
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
    assert kind.roles | {"lock"} <= seen | {"lock"}
    assert "lock" in seen


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_reads_its_main_key(kind: Kind[Any]) -> None:
    keys = kind.keys("orders", prefix="tenure:")
    plan = kind.read(keys, 10)
    step = next(plan)
    assert isinstance(step, Eval | Command)
    touched = step.keys if isinstance(step, Eval) else step.args
    assert kind.main_key(keys) in touched
    assert kind.main_key(keys) == key_strings(keys).get("lock", key_strings(keys).get("count"))
    plan.close()


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
def test_every_kind_describes_a_snapshot_of_itself(kind: Kind[Any]) -> None:
    keys = kind.keys("orders", prefix="tenure:")
    assert kind.acl_keys(keys)[0] == kind.main_key(keys)
    assert kind.scripts
    assert kind.releasable == (kind.force_release is not None)
    assert kind.single_holder <= kind.releasable
    assert (kind.release_flag is None) <= kind.releasable  # only the default kind has none
    assert kind.instead or kind.releasable


def test_one_kind_is_the_default_of_release() -> None:
    defaults = [k for k in KINDS if k.release_flag is None]
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
    flags = {k.name: k.release_flag for k in KINDS if k.release_flag is not None}
    assert _release_flags() == flags
    assert {k: f for k, f in flags.items() if by_name(k).releasable} == _cli.RELEASE_FLAGS


def test_the_doctors_kinds_come_from_the_registry() -> None:
    assert {k.option: k.name for k in KINDS}.items() <= _doctor.KIND_NAMES.items()
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
        assert view.spec is kind
