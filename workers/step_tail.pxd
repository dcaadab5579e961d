import cython
from workers.fast_pricing cimport AttentionTerms, PassTail

cdef class StepTail:
    cdef public object _arrays
    cdef public bint _plain
    cdef public double accepted
    cdef public bint decode
    cdef public double draft_overhead_s
    cdef public double drafts
    cdef public object first
    cdef public object later
    cdef public PassTail main
    cdef public double overhead_s
    cdef public double pp

    @cython.locals(main=PassTail, a=AttentionTerms, half=double, q_tok=double, a_ctx=double,
                   tp=double, n_full=double, n_slide=double, window=double, lin_flops=double,
                   kv_seq=double, state=double, w_bytes=double, act_bytes=double, proj_s=double,
                   peak_attn=double, hbm_bw=double, network=double, latency=double,
                   pp=double, overhead=double, compute=bint, t_dense=double, t_always=double,
                   t_experts=double, t_head=double, total=double, i=Py_ssize_t, context=double,
                   ctx_end=double, kv_read=double, attn_bytes=double, t_cm=double,
                   ctx_mean=double, flops=double, stage_s=double, step_s=double,
                   st=double, ov=double, acc=double,
                   has_overlap=bint, has_accepted=bint, has_start=bint)
    cpdef list tpots_s(self, double first, Py_ssize_t steps, object start=*)
