# Types for compiling storage/links.py with Cython (see native/__init__.py): the flows
# and the fabric as extension types with typed fields. links.py stays the one source;
# without a C compiler it runs as it is, with the same results.
import cython

cdef class _Flow:
    cdef public object fid
    cdef public tuple route
    cdef public double size_bytes
    cdef public double remaining_bytes
    cdef public double rate_bytes_per_s

cdef class Fabric:
    cdef public dict _links
    cdef public dict _flows
    cdef public dict _keys
    cdef public dict _crossing
    cdef public object _next_id
    cdef public double now_s
    cdef public list _ended_bytes
    cdef public dict _link_paths
    cdef public dict _link_ended
    cdef public dict _ended_moved
    cdef public list _finished
    cdef public double next_s
    cdef public list _due
    cdef public dict loads
    cdef public dict _paths
    cdef public dict _sharings

    @cython.locals(flow=_Flow, finish_s=cython.double, dt=cython.double)
    cpdef list advance(self, double now_s)

    @cython.locals(flow=_Flow, left=cython.double, moved=cython.double)
    cpdef _move(self, double dt)

    @cython.locals(flow=_Flow, left=cython.double, moved=cython.double, rate=cython.double,
                   finish_s=cython.double, next_s=cython.double, now_s=cython.double,
                   i=Py_ssize_t, rates=tuple)
    cpdef _share(self, double dt=*)
