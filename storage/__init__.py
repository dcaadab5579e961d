"""KV cache as immutable blobs in tiers: HBM, CPU DRAM, rack cache, parallel file system."""

import native  # noqa: F401 (its guard, before any compiled module is imported)
