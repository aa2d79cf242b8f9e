"""The Django recipe (examples/django_app.py) through Django's test client, on
a real server: of two requests at once, one rebuilds the index and the other
is told it is already running."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from types import ModuleType

import pytest
import redis
from django.http import HttpResponse
from django.test import Client


@pytest.fixture
def app(url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """The example, its client on the test server (it reads ``REDIS_URL``
    once, when first imported: the shared server's URL is the session's)."""
    monkeypatch.setenv("REDIS_URL", url)
    import django_app
    from django.conf import settings

    assert url == settings.REDIS_URL
    monkeypatch.setattr(django_app, "WORK", 1.0)
    yield django_app


def test_two_requests_at_once_rebuild_once(app: ModuleType, r: redis.Redis) -> None:
    first: list[HttpResponse] = []
    running = threading.Thread(target=lambda: first.append(Client().post("/rebuild-index")))
    running.start()
    deadline = time.monotonic() + 10
    while not r.get("search-index:rebuilds"):  # the first request is rebuilding
        assert running.is_alive() and time.monotonic() < deadline
        time.sleep(0.01)
    second = Client().post("/rebuild-index")
    assert running.is_alive(), "the first rebuild ended before the second request"
    running.join(10)
    assert second.status_code == 409, second.content
    assert first[0].status_code == 200, first[0].content
    assert first[0].json() == {"status": "rebuilt", "documents": 42}
    assert r.get("search-index:rebuilds") == b"1"
    # The lock was released: the next request rebuilds.
    assert Client().post("/rebuild-index").status_code == 200
    assert r.get("search-index:rebuilds") == b"2"
