"""KV cache as immutable blobs in tiers: HBM, CPU DRAM, rack cache, parallel file system."""
