"""Text as the index sees it: chunks within the model's window, and the lexical columns (terms,
defined names) the BM25 arm searches."""
