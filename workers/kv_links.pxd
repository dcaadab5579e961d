# Types for compiling workers/kv_links.py with Cython (see native/__init__.py): the
# links' shell and its transfers as extension types, calling the typed fabric directly.
import cython
from storage.links cimport Fabric
from workers.link_use cimport LinkUse

cdef class Transfer:
    cdef public list _callbacks
    cdef public object done_s
    cdef public list landed
    cdef public Py_ssize_t pending

cdef class KvLinks:
    cdef public object topology
    cdef public object handoff
    cdef public object promote_min_sessions
    cdef public set _racks
    cdef public Fabric fabric
    cdef public double window_s
    cdef public dict bytes_by_path
    cdef public dict _flows
    cdef public object _timer
    cdef public double _timer_s
    cdef public object _fired
    cdef public object _fired_on
    cdef public double _last_s
    cdef public long long _last_window
    cdef public dict _use
    cdef public dict _uses
    cdef public list _busy
    cdef public tuple _busy_loads
    cdef public dict _landing
    cdef public dict _routes
    cdef public object _wake

    @cython.locals(transfer=Transfer, fabric=Fabric)
    cpdef double _settle(self, double now_s, object loop)

    @cython.locals(fabric=Fabric, next_s=cython.double, busy=list, use=LinkUse)
    cpdef _after_change(self, object loop)

    @cython.locals(use=LinkUse, load=cython.double, moved=cython.double, dt=cython.double,
                   t0=cython.double, w=cython.double, first=cython.longlong,
                   last=cython.longlong, busy=list, loads=tuple)
    cpdef _integrate(self, double now_s)
