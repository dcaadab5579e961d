# Types for compiling workers/link_use.py with Cython (see native/__init__.py).

cdef class LinkUse:
    cdef public double acc
    cdef public object carried
    cdef public object index
    cdef public str name
    cdef public double total
    cdef public long long window

    cpdef add(self, long long window, double moved)
