"""A cron job that runs on one host at a time: ``tenure run`` around a script.

Put the same line in the crontab of every host that may run the job (they all
use one server)::

    REDIS_URL=redis://locks.internal:6379/0
    */15 * * * * tenure run --no-wait --conflict-exit-code 0 report -- python3 ~/cron_job.py

At each turn the first host to take the lock ``report`` runs the script; the
others find it held and skip the turn (``--no-wait``) with exit status 0
(``--conflict-exit-code 0``: not an error, so cron mails nothing). While the
script runs, ``tenure run`` renews the lease every third of ``--ttl`` (30 s by
default); if ``tenure run`` is killed, the lock outlives it by at most the ttl
and, on Linux, the script is killed with it.

The script finds the lease's fence in ``TENURE_FENCE`` and stores its result
through a ``FencedKey`` with it, so a run whose lease ended (paused for longer
than the ttl) cannot overwrite the result of a newer run.

``tests/test_cron.py`` starts two such runs at once and checks that one ran
the script and the other skipped its turn.
"""

from __future__ import annotations

import json
import os
import time

import redis

from tenure import FencedKey


def main() -> None:
    client = redis.Redis.from_url(os.environ["REDIS_URL"])
    fence = int(os.environ["TENURE_FENCE"])  # set by `tenure run`
    client.rpush("report:runs", json.dumps({"pid": os.getpid(), "fence": fence}))
    time.sleep(float(os.environ.get("REPORT_WORK", "1")))  # the work
    FencedKey(client, "report:body").set(f"report {time.ctime()}", fence=fence)
    client.close()


if __name__ == "__main__":
    main()
