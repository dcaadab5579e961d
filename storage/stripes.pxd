import cython

cdef class Stripe:
    cdef public list _shares
    cdef public tuple holders
    cdef public object rate
    cdef public list rates
    cdef public object total_rate

    @cython.locals(out=list)
    cpdef list sent_bytes(self, object kv_bytes)

cpdef tuple sources_of(dict sent)

@cython.locals(groups=dict, stripe=Stripe, holders=tuple)
cpdef add_sent(dict sent, object kv_bytes, object stripes)

cdef class SentByChain:
    cdef public dict _kept

    @cython.locals(kept=dict, n=Py_ssize_t, last=Py_ssize_t, m=Py_ssize_t, sent=dict, head_sent=dict)
    cpdef dict sent(self, list ids, list sizes, list stripes)
    @cython.locals(kept=dict)
    cpdef _keep(self, list ids, list stripes, dict sent)
