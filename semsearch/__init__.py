"""semsearch: local semantic search over your files, in one SQLite index.

The library's entry point is :class:`semsearch.index.Index`; this package module stays light so
``semsearch --help`` starts fast.
"""

__version__ = "0.1.0"
