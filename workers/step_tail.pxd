import cython
from costmodel.terms cimport num
from workers.fast_pricing cimport PassTail

cdef class StepTail:
    cdef public double accepted
    cdef public bint decode
    cdef public double draft_overhead_s
    cdef public double drafts
    cdef public PassTail first
    cdef public PassTail later
    cdef public PassTail main
    cdef public double overhead_s
    cdef public double pp

    @cython.locals(rest=double)
    cpdef num draft_s(self, num context, object mx=*, object mn=*)
    @cython.locals(stage_s=num)
    cpdef num step_s(self, num context, object mx=*, object mn=*)
    cpdef num tpot_s(self, num step_s)
    @cython.locals(has_start=bint, st=double, total=double, i=Py_ssize_t, tpot=double)
    cpdef list tpots_s(self, double first, Py_ssize_t steps, object start=*)
