import cython

@cython.locals(common=Py_ssize_t, step=Py_ssize_t)
cpdef Py_ssize_t _common_blocks(object seq, Py_ssize_t pos, tuple rest, Py_ssize_t last) except -1

cdef class BlobIndex:
    cdef public object block_tokens
    cdef public object kv_bytes_per_token
    cdef public list _blobs
    cdef public list sizes
    cdef public dict _contents
    cdef public dict _children
    cdef public dict _walks
    cdef public dict _tips

    @cython.locals(walk=tuple, resumed=tuple, children=dict, blobs=list, n=Py_ssize_t,
                   pos=Py_ssize_t, end=Py_ssize_t, passed=list, rest=tuple, found=tuple,
                   found_ids=tuple, last=object)
    cpdef object match(self, object block_ids)
    @cython.locals(tips=dict, group=dict)
    cpdef _keep_tip(self, tuple walk, tuple resumed)
    @cython.locals(group=dict, n=Py_ssize_t, end=Py_ssize_t, tip=tuple)
    cpdef tuple _resume(self, object seq)
    @cython.locals(start=Py_ssize_t, n=Py_ssize_t, contents=dict, new=list, next_id=Py_ssize_t)
    cpdef tuple describe(self, object block_ids, object segment_ends=*)
    @cython.locals(inside=Py_ssize_t)
    cpdef register(self, object blob)
