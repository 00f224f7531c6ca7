"""Indexing a folder: the pipeline (list, read, chunk, embed, write), the dry-run plan, and the
reports an index run returns."""
