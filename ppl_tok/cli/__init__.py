"""The ``ppl-tok`` command line: one module per command family, below them the shared helpers (``common``).

Nothing outside this package imports it: the library never depends on its command line.
"""
