"""Drivers: the only code that does I/O, sleeps, knows owner identity or runs in the background.

``_sync`` (threads; ``redis.Redis`` or ``valkey.Valkey`` clients) and ``_async``
(tasks; ``redis.asyncio.Redis`` or ``valkey.asyncio.Valkey`` clients) are
packages that expose the same names. ``_async`` is written by hand, one module
per concern; ``_sync`` is generated from it by ``scripts/unasync.py`` but for
``calls``, which differs per flavour; the two take what differs between
threads and tasks from ``_runtime_sync`` and ``_runtime_async`` (see
``docs/architecture.md``, "The drivers"):

- ``Client``: the client type the facade accepts.
- ``check_client(client, owner)``: the client, or :class:`~tenure.InvalidArgument`
  (naming what was passed) for one the class named ``owner`` can't use; sends
  nothing (the rules are :mod:`._clients`').
- ``run(client, plan)``: drive a plan from :mod:`tenure._plans` to its result.
- ``run_together(client, plans)``: drive several plans side by side on one
  client, each round's script calls in one round trip (a ``MultiLock``'s
  parts on one server); ``batch_key(client)`` tells which clients may share
  it (their connection pool; ``None`` for a Redis Cluster client).
- ``current_owner()``: this thread's / task's owner id (see :mod:`._identity`).
- ``wait_event(event, timeout)``, ``sleep(seconds)``: wait (a Redlock waiter);
  ``new_event()``: the event a Redlock waiter waits on, and a lease's ``lost``
  (the sync one a ``threading.Event`` that no interrupt leaves locked).

Their ``fanout`` modules (``from tenure._drivers._sync import fanout``) add
the calls on several servers at once (a Redlock's masters):

- ``run_each(jobs, timeout)``: drive one plan on each of several clients at
  once, each bounded by ``timeout`` (a Redlock's round over its masters: each
  round written to every server, then the replies read).
- ``listen_each(clients, channel, event, timeout)``: listen on a broadcast
  channel on several servers at once.
- ``watch_shared(lease, renew, send)`` (and ``stop_renewing_shared``,
  ``unwatch_shared``): the watchdog shared by every lease renewed with
  ``send`` (one per process, and per event loop; a Redlock's quorum renewal of
  any leases, grouped by master) instead of one client's pipeline.

Each client gets, per process, one state: the server's capabilities (probed on
first use) and one wake hub (one pub/sub connection, channels subscribed on
demand with reference counts, a process-local gate per lock so that one waiter
per name contends at a time; a fair lock's waiters each have a channel of their
own instead, since each has its own place in the queue).

A client of either library, redis-py or valkey-py (the Valkey project's fork of
redis-py, with its own module, class and exception names), is driven by the same
driver code: what a driver makes on the client's connection pool (the hub's
``PubSub``, the clients of renewals and hand-offs) and the ``NoScriptError`` it
catches come from the client's own library, found once per client class. Mixing
them fails: valkey-py's pool has another ``get_connection`` signature than the one
redis-py's ``PubSub`` calls, and each library raises only its own exceptions.
"""
