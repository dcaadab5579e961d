import cython
from storage.holds cimport Holds
from storage.placement cimport Placement

from storage.counters cimport StoreCounters

cdef class Commit(Holds):
    cdef public StoreCounters counters
    cdef public object on_apply

    @cython.locals(placement=Placement, counters=StoreCounters, dropped_here=Py_ssize_t, moves=bint, pins=dict)
    cpdef object apply(self, object plan)
