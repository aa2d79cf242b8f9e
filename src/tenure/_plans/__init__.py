"""Plans: every decision tenure makes, as pure generators.

Rule: nothing in this package performs I/O or reads the clock except through a
``now`` argument. Plans import nothing from ``redis``, ``asyncio``,
``threading`` or ``time``. They yield :mod:`tenure._protocol` steps and receive
the replies, so they are tested with canned replies and a fake clock.
"""
