import cython
from storage.store cimport _StoreBase

cpdef object fetch(_StoreBase store, object block_ids, object hbm, object now_s,
                   object recompute_s)
cpdef release_fetch(_StoreBase store, object hbm, object result)
cpdef object write_chain(_StoreBase store, object session_id, object block_ids, object hbm,
                         object host, object now_s)
cpdef object _commit_write(_StoreBase store, object session_id, object block_ids, object plan,
                           object host, object now_s)
cpdef tuple write_and_offload(_StoreBase store, object session_id, object block_ids,
                              object hbm, object host, object now_s)
cpdef offload(_StoreBase store, object chain, object hbm, object now_s)
cpdef tuple write_for_handoff(_StoreBase store, object session_id, object block_ids,
                              object hbm, object host, object now_s)
cpdef release_handoff(_StoreBase store, object handoff, object now_s)
