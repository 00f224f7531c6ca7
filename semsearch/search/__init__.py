"""Answering a query: the arms and their fusion, the ranking priors, the top-k hits, and the
passages shown for them."""
