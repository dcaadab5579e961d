import cython

cdef class Shape:
    cdef public object decode
    cdef public double n_seq
    cdef public double q_tok
    cdef public double t_group
    cdef public double t_rank

cdef class AttentionTerms:
    cdef public object _arrays
    cdef public double a_ctx
    cdef public double act_bytes
    cdef public double half
    cdef public double hbm_bw
    cdef public double kv_seq
    cdef public double lin_flops
    cdef public bint monotone
    cdef public double n_full
    cdef public double n_slide
    cdef public double peak_attn
    cdef public double proj_s
    cdef public double q_tok
    cdef public double state
    cdef public double tp
    cdef public double w_bytes
    cdef public double window

cdef class PassTail:
    cdef public tuple after
    cdef public AttentionTerms attn
    cdef public double latency_s
    cdef public double network_s
    cdef public object overlap
