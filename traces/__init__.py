"""Trace readers, the native format, statistics, validation and a synthetic generator."""
