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

    @cython.locals(counts=list)
    cpdef bint referenced(self, object blob_id)
    @cython.locals(held=set, counts=list, known=Py_ssize_t, copies=dict)
    cpdef ref(self, object session_id, object blob_ids)
    @cython.locals(counts=list)
    cpdef release(self, object session_id)
    @cython.locals(pins=dict)
    cpdef bint pinned(self, object blob_id, object location)
    @cython.locals(here=dict)
    cpdef pin(self, object location, object blob_ids)
    cpdef pin_fetched(self, object plan)
    cpdef tuple pin_present(self, object location, object blob_ids)
    @cython.locals(pins=dict)
    cpdef _count_pins(self, object location, object ids)
    @cython.locals(pins=dict)
    cpdef unpin(self, object location, object blob_ids)
