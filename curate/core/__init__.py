"""The stage contract: the record schema, Parquet shards, the manifest and its registry of stage kinds, the one
stage runner, configs and the error base class. Every other package stands on this one."""
