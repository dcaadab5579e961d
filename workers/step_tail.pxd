import cython
from workers.fast_pricing cimport PassTail

cdef class StepTail:
    cdef public double accepted
    cdef public bint decode
    cdef public double draft_overhead_s
    cdef public double drafts
    cdef public object first
    cdef public object later
    cdef public PassTail main
    cdef public double overhead_s
    cdef public double pp
