"""Plans: every decision tenure makes, as pure generators.

Rule: nothing in this package performs I/O or reads the clock except through a
``now`` argument. Plans import nothing from ``redis``, ``asyncio``,
``threading`` or ``time``. They yield :mod:`tenure._protocol` steps and receive
the replies, so they are tested with canned replies and a fake clock. The
plans over several servers or parts (a Redlock's :mod:`.rounds`, a
MultiLock's :mod:`.multi`) yield steps of their own (:mod:`.fanout`, and
:mod:`.multi`'s), which the facade performs.

Each primitive's module ends with its :class:`~.kind.Kind` (what the operator
tools, the CLI, doctor and the wake hub need of it), and :mod:`.kinds` is the
registry of them all.
"""
