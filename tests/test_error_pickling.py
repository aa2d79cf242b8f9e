"""Every error tenure raises pickles as it is: its type, message and
attributes cross a process boundary (``multiprocessing``, a process pool, a
task queue). Each is raised by a real operation on a real server, then sent
through ``pickle``."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

import pytest
import redis

from tenure import (
    AcquireTimeout,
    AlreadyHeldError,
    FencedKey,
    InvalidArgument,
    Lock,
    LockLostError,
    LockUpgradeError,
    NotOwnedError,
    NotReplicatedError,
    PermissionDenied,
    ReadWriteLock,
    StaleFenceError,
    TenureError,
    WrongTypeError,
)


def _raised(action: Callable[[], object]) -> TenureError:
    with pytest.raises(TenureError) as info:
        action()
    return info.value


def _acquire_timeout(r: redis.Redis) -> TenureError:
    r.set("tenure:{pk:timeout}", "another owner", px=30_000)

    def take() -> None:
        with Lock(r, "pk:timeout")(timeout=0):
            pass

    return _raised(take)


def _not_owned(r: redis.Redis) -> TenureError:
    lease = Lock(r, "pk:twice").acquire()
    assert lease is not None
    lease.release()
    return _raised(lease.release)


def _lost(r: redis.Redis) -> TenureError:
    lease = Lock(r, "pk:lost", auto_renew=False).acquire()
    assert lease is not None
    r.delete("tenure:{pk:lost}")
    return _raised(lease.extend)


def _already_held(r: redis.Redis) -> TenureError:
    lock = Lock(r, "pk:again")
    assert lock.acquire() is not None
    return _raised(lock.acquire)


def _upgrade(r: redis.Redis) -> TenureError:
    rw = ReadWriteLock(r, "pk:rw")
    assert rw.read.acquire() is not None
    return _raised(rw.write.acquire)


def _stale(r: redis.Redis) -> TenureError:
    key = FencedKey(r, "pk:fenced")
    key.set("new", fence=10)
    return _raised(lambda: key.set("old", fence=9))


def _wrong_type(r: redis.Redis) -> TenureError:
    r.rpush("tenure:{pk:wrong}", "another program's")
    return _raised(lambda: Lock(r, "pk:wrong").acquire(timeout=5))


def _not_replicated(r: redis.Redis) -> TenureError:
    lock = Lock(r, "pk:replicas", min_replicas=1, replica_timeout=0.05)
    return _raised(lock.acquire)


def _invalid(r: redis.Redis) -> TenureError:
    return _raised(lambda: Lock(r, "pk:bad", ttl=-1))


RAISED: dict[type[TenureError], Callable[[redis.Redis], TenureError]] = {
    AcquireTimeout: _acquire_timeout,
    NotOwnedError: _not_owned,
    LockLostError: _lost,
    AlreadyHeldError: _already_held,
    LockUpgradeError: _upgrade,
    StaleFenceError: _stale,
    WrongTypeError: _wrong_type,
    NotReplicatedError: _not_replicated,
    InvalidArgument: _invalid,
}


def _same(error: TenureError) -> None:
    back: Any = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert vars(back) == vars(error)


@pytest.mark.parametrize("kind", RAISED, ids=lambda k: k.__name__)
def test_an_error_raised_on_a_server_pickles_as_it_is(
    r: redis.Redis, kind: type[TenureError]
) -> None:
    error = RAISED[kind](r)
    assert type(error) is kind
    _same(error)


def test_an_error_made_by_hand_pickles_as_it_is() -> None:
    _same(PermissionDenied("write", "tenure:{x}", "lock_acquire"))
    _same(AcquireTimeout("x", None))
    _same(NotOwnedError("x", None, "no lease"))
