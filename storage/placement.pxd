import cython

cdef class Placement:
    cdef public object layout
    cdef public dict copies
    cdef public dict at
    cdef public dict used_bytes
    cdef public dict capacity_bytes
    cdef public dict stripes
    cdef public dict _plus
    cdef public dict _minus
    cdef public dict _sets
    cdef public dict fastest_tier
    cdef public dict slowest_tier

    @cython.locals(known=object, out=frozenset)
    cpdef object shared_set(self, object held)
    @cython.locals(out=object)
    cpdef object _with(self, object held, object location)
    @cython.locals(out=object, rest=frozenset)
    cpdef object _without(self, frozenset held, object location)
    @cython.locals(here=dict, copies=dict, before=Py_ssize_t)
    cpdef add_run(self, object blob_ids, object location, object kv_bytes, object now_s)
    @cython.locals(here=dict, copies=dict, gone=list)
    cpdef list remove_run(self, object blob_ids, object location, object kv_bytes)
    @cython.locals(here=dict, n=Py_ssize_t)
    cpdef touch_run(self, object blob_ids, object location, object now_s)
