import cython
from costmodel.terms cimport (FloatWork, attention_compute_s, attention_memory_s, attention_s,
                             num, overlap_stage)

cdef class Shape:
    cdef public object decode
    cdef public double n_seq
    cdef public double q_tok
    cdef public double t_group
    cdef public double t_rank

cdef class AttentionTerms:
    cdef public bint monotone
    cdef public object named
    cdef public FloatWork work
    cdef public object work_arrays

cdef class PassTail:
    cdef public tuple after
    cdef public object arrays
    cdef public AttentionTerms attn
    cdef public double fraction
    cdef public double latency_s
    cdef public double network_s
    cdef public bint overlap

    @cython.locals(t_cm=num, term=double)
    cpdef num time_s(self, num context, object mx=*, object mn=*)
