"""Selection and export: difficulty buckets, balanced selections, curricula, and the export formats."""
