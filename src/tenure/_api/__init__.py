"""The public facade. ``_async.py`` is written by hand; ``_sync.py`` is generated from it."""
