import cython

cdef class Shape:
    cdef public object decode
    cdef public double n_seq
    cdef public double q_tok
    cdef public double t_group
    cdef public double t_rank

cdef class AttentionTerms:
    cdef public bint monotone
    cdef public object work
    cdef public object work_arrays

cdef class PassTail:
    cdef public tuple after
    cdef public AttentionTerms attn
    cdef public object eff
    cdef public double latency_s
    cdef public double network_s
