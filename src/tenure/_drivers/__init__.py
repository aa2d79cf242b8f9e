"""Drivers: the only code that does I/O, sleeps, knows owner identity or runs in the background.

``_sync`` (threads, ``redis.Redis``) and ``_async`` (tasks, ``redis.asyncio.Redis``)
expose the same names:

- ``Client``: the client type the facade accepts.
- ``run(client, plan)``: drive a plan from :mod:`tenure._plans` to its result.
- ``current_owner()``: this thread's / task's owner id (see :mod:`._identity`).

Each client gets, per process, one state: the server's capabilities (probed on
first use) and one wake hub (one pub/sub connection, channels subscribed on
demand with reference counts, a process-local gate per lock so that one waiter
per name contends at a time; a fair lock's waiters each have a channel of their
own instead, since each has its own place in the queue).
"""
