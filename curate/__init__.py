"""gradus.curate: ingest, filter, deduplicate and decontaminate math problems into one record schema.

Plain library code (no Prefect, no torch): every stage is a function from shards to shards.
"""
