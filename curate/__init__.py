"""gradus.curate: math problems in, difficulty-scored and balanced prompt sets out. Plain library code (no Prefect).

The packages follow the pipeline, each using only those above it:

    core/        the record schema, shards, the manifest and stage registry, the runner, configs, errors
    sources/     readers, adapters onto the record schema, gold-answer extraction, the synthetic generator
    clean/       text normalization and ids, filters, decontamination, dedup
    difficulty/  engines, models, templates, grading (math-verify), estimation and its store
    select/      buckets, balanced selections, curricula, exports
    pipeline.py  the curation stages (ingest, filter, decontam, dedup) and ``curate_all``
    demo.py      the bundled demo, end to end
"""
