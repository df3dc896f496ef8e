"""Cleaning: text normalization and content ids, filters, decontamination, dedup."""
