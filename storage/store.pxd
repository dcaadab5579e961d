import cython
from storage.blobs cimport BlobIndex
from storage.commit cimport Commit
from storage.holds cimport Holds
from storage.placement cimport Placement
from storage.stripes cimport SentByChain, sources_of
from storage.counters cimport lookup_tokens, miss_tokens, served_hits
from storage.offload cimport direct_offload, leading_drops

cpdef tuple _sorted_ids(object blob_ids)

cpdef tuple _recompute_steps(list ids, object dst, object missing_bytes, object draft)

@cython.locals(sent=dict, steps=tuple)
cpdef tuple _load_steps(list ids, list sizes, object missing_bytes, object dst, list stripes,
                        list times_s, object load_time_s, object draft,
                        SentByChain sent_memo)

cdef class _StoreBase(Commit):
    cdef public object layout
    cdef public object _sent_by_chain

    cpdef object match(self, object block_ids)
    @cython.locals(copies=dict)
    cpdef object _reachable(self, object match)
    cpdef _check(self, object location, object now_s)
    @cython.locals(index=BlobIndex, chain=tuple, ids=list, sizes=list, stripes=list,
                   times_s=list)
    cpdef object plan_fetch(self, object block_ids, object dst, object now_s,
                            object recompute_s=*)
    @cython.locals(placement=Placement, at_dst=dict, chain=tuple, helds=list)
    cpdef tuple _fetch_lookup(self, object block_ids, object dst)
    @cython.locals(known=dict, stripes=list)
    cpdef list _fetch_stripes(self, list ids, object dst, object now_s, list helds,
                              object draft)
    @cython.locals(new=tuple, new_ids=tuple)
    cpdef object plan_write(self, object block_ids, object dst, object now_s,
                            object segment_ends=*)
    @cython.locals(lost=list)
    cpdef object _write_plan(self, object match, tuple new, tuple new_ids, tuple chain,
                             object dst, object now_s)
    @cython.locals(new=tuple, new_ids=tuple, old=tuple, chain=tuple, placement=Placement,
                   pins=dict)
    cpdef object plan_write_offload(self, object block_ids, object src, object now_s)
    @cython.locals(chain=tuple, pins=dict)
    cpdef object plan_offload(self, object blob_ids, object src, object now_s)
