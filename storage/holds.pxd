import cython
from storage.blobs cimport BlobIndex
from storage.placement cimport Placement

cdef class Holds:
    cdef public BlobIndex index
    cdef public Placement placement
    cdef public Py_ssize_t version
    cdef public dict _refs
    cdef public list _ref_count
    cdef public dict _pins
    cdef public dict _pin_runs

    @cython.locals(counts=list)
    cpdef bint referenced(self, object blob_id)
    @cython.locals(held=set, counts=list, known=Py_ssize_t, copies=dict)
    cpdef ref(self, object session_id, object blob_ids)
    @cython.locals(counts=list)
    cpdef release(self, object session_id)
    @cython.locals(pins=dict)
    cpdef bint pinned(self, object blob_id, object location)
    @cython.locals(runs=list, pins=dict)
    cpdef dict _pins_at(self, object location)
    @cython.locals(here=dict)
    cpdef pin(self, object location, object blob_ids)
    cpdef pin_fetched(self, object plan)
    cpdef tuple pin_present(self, object location, object blob_ids)
    @cython.locals(more=tuple, runs=list, i=Py_ssize_t)
    cpdef tuple pin_more(self, object location, tuple pinned, object blob_ids)
    @cython.locals(runs=list)
    cpdef _pin_run(self, object location, tuple ids)
    @cython.locals(pins=dict)
    cpdef _count_pins(self, object location, object ids)
    @cython.locals(runs=list, pins=dict, i=Py_ssize_t)
    cpdef unpin(self, object location, object blob_ids)
