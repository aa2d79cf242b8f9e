"""A Django view whose slow job runs at most once at a time, across every
process and host: a function decorated with a tenure ``Lock``.

``POST /rebuild-index`` calls ``rebuild_index``, decorated with
``@index_lock(timeout=0, skip=True)``: if another request (in this process or
any other that uses the server) is rebuilding the index, the call returns
``None`` at once without running, and the view answers 409; otherwise it runs
while holding the lock and the view answers 200. Without ``skip``, a call that
does not get the lock within ``timeout`` raises ``AcquireTimeout``; without
``timeout`` it waits as long as it takes. The same decorator serves a
management command's ``handle()`` or a Celery task.

A whole Django project in one file, for the example's sake (settings below).
Run it::

    REDIS_URL=redis://localhost:6379/0 python examples/django_app.py runserver
    curl -X POST localhost:8000/rebuild-index

``tests/test_django.py`` sends two requests at once through Django's test
client and checks that only one rebuilt the index.
"""

from __future__ import annotations

import os
import sys
import time

import django
import redis
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.http import require_POST

from tenure import Lock

if not settings.configured:
    settings.configure(
        ROOT_URLCONF=__name__,
        ALLOWED_HOSTS=["*"],
        SECRET_KEY=os.environ.get("DJANGO_SECRET_KEY", "an example's key"),
        REDIS_URL=os.environ.get("REDIS_URL", "redis://localhost:6379/0"),
    )
    django.setup()

client = redis.Redis.from_url(settings.REDIS_URL)
index_lock = Lock(client, "search-index")  # renewed while held; a crash frees it in 30 s
WORK = 2.0  # seconds that a rebuild takes here


@index_lock(timeout=0, skip=True)
def rebuild_index() -> int:  # decorated: int | None (None: skipped, another was running)
    """Rebuild the search index; the number of documents indexed."""
    client.incr("search-index:rebuilds")
    time.sleep(WORK)  # the work
    return 42


@require_POST
def rebuild(request: HttpRequest) -> JsonResponse:
    documents = rebuild_index()
    if documents is None:
        return JsonResponse({"status": "already running"}, status=409)
    return JsonResponse({"status": "rebuilt", "documents": documents})


urlpatterns = [path("rebuild-index", rebuild)]

if __name__ == "__main__":
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
