"""Sources: readers (files, hub ids; a fast arrow path and a line-by-line fallback), the adapters that map each
known data set onto the record schema, gold-answer extraction, and the synthetic generator."""
