# Types for compiling storage/links.py with Cython (see native/__init__.py): the flows,
# their paths' groups and the fabric as extension types with typed fields. links.py
# stays the one source; without a C compiler it runs as it is, with the same results.
import cython

cdef class _Flow:
    cdef public object fid
    cdef public tuple route
    cdef public double size_bytes
    cdef public double start_at
    cdef public double end_at

cdef class _LinkState:
    cdef public str name
    cdef public double bytes_per_s
    cdef public Py_ssize_t n
    cdef public list groups
    cdef public double spare
    cdef public Py_ssize_t count
    cdef public double load
    cdef public long long stamp

cdef class _Group:
    cdef public tuple route
    cdef public long long stamp
    cdef public Py_ssize_t n
    cdef public double at_bytes
    cdef public double rate_bytes_per_s
    cdef public list ends
    cdef public double starts
    cdef public double share

    cpdef double at(self, double dt)

    @cython.locals(moved=cython.double)
    cpdef double moved(self, double dt)

cdef class Fabric:
    cdef public dict _links
    cdef public dict _flows
    cdef public dict _groups
    cdef public dict _states
    cdef public long long _stamp
    cdef public object _next_id
    cdef public double now_s
    cdef public double _based_s
    cdef public list _ended_bytes
    cdef public dict _link_paths
    cdef public dict _link_ended
    cdef public dict _ended_moved
    cdef public list _finished
    cdef public double next_s
    cdef public list _due
    cdef public dict loads
    cdef public dict _paths
    cdef public list _touched

    @cython.locals(group=_Group, state=_LinkState, at=cython.double, dt=cython.double,
                   route=tuple, size=cython.double)
    cpdef list start_many(self, double now_s, object flows)

    @cython.locals(group=_Group, flow=_Flow, state=_LinkState, finish_s=cython.double,
                   end_at=cython.double, k=Py_ssize_t, gone=cython.bint)
    cpdef list advance(self, double now_s)

    @cython.locals(group=_Group, state=_LinkState, at=cython.double, rate=cython.double,
                   left=cython.double, finish_s=cython.double, next_s=cython.double,
                   now_s=cython.double, dt=cython.double, loads=dict)
    cpdef _share(self)

    @cython.locals(group=_Group, link=_LinkState, state=_LinkState, n=Py_ssize_t, _j=Py_ssize_t,
                   count=Py_ssize_t, share=cython.double, left=cython.double,
                   then=cython.double, load=cython.double, stamp=cython.longlong, busy=list,
                   touched=list, i=Py_ssize_t)
    cpdef _fill_piece(self)
