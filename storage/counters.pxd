import cython
from storage.placement cimport Placement

cdef class StoreCounters:
    cdef public object moved_bytes
    cdef public object hit_tokens
    cdef public object miss_tokens
    cdef public object requested_tokens
    cdef public object recomputed_tokens
    cdef public object dropped_blobs
    cdef public object local_hit_tokens

@cython.locals(hits=dict, at_dst=dict, copies=dict, fastest=dict, chain=tuple, used_ends=list,
               first=Py_ssize_t, end=Py_ssize_t, used_end=Py_ssize_t)
cpdef tuple lookup_tokens(object match, object dst, Placement placement, object block_tokens,
                          object helds=*)

cpdef dict miss_tokens(dict hits, object unmatched_tokens)

@cython.locals(out=dict, remainders=list)
cpdef dict served_hits(dict hits, object local, object dst_tier, dict sent_bytes)
