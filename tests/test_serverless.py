"""tests/conftest.py's ``serverless`` mark: a test that uses no server fixture
has it, and while it runs ``TENURE_SERVER`` names no binary (a server started
on it fails); a test on the shared server or a private one has neither."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest
import redis
from conftest import NO_SERVER

from tenure._server import ServerProcess, ServerUnavailable


def test_a_test_without_server_fixtures_is_serverless_and_can_start_no_server(
    request: pytest.FixtureRequest,
) -> None:
    assert request.node.get_closest_marker("serverless")
    assert os.environ["TENURE_SERVER"] == NO_SERVER
    with pytest.raises(ServerUnavailable, match="serverless"):
        ServerProcess(os.environ["TENURE_SERVER"]).start()


def test_a_test_on_the_shared_server_is_not_serverless(
    request: pytest.FixtureRequest, r: redis.Redis
) -> None:
    assert request.node.get_closest_marker("serverless") is None
    assert os.environ.get("TENURE_SERVER") != NO_SERVER
    assert r.ping()


def test_a_test_on_a_private_server_is_not_serverless(
    request: pytest.FixtureRequest, make_server: Callable[..., ServerProcess]
) -> None:
    assert request.node.get_closest_marker("serverless") is None
    assert os.environ.get("TENURE_SERVER") != NO_SERVER


@pytest.mark.each_server
def test_a_test_marked_each_server_is_not_serverless(request: pytest.FixtureRequest) -> None:
    assert request.node.get_closest_marker("serverless") is None
    assert os.environ.get("TENURE_SERVER") != NO_SERVER
