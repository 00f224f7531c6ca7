"""The SQLite index: one file holding files, chunks, vectors and the FTS5 table."""
