import cython

# The terms at a context, built on C doubles (a FloatWork and a float context: a
# worker's decode steps) and on Python objects (arrays: the vectorised core).
ctypedef fused num:
    double
    object

ctypedef fused work_t:
    FloatWork
    object

cdef class FloatWork:
    cdef public double a_ctx
    cdef public double act_bytes
    cdef public double half
    cdef public double hbm_bw
    cdef public double kv_seq
    cdef public double lin_flops
    cdef public bint linear
    cdef public double n_full
    cdef public double n_slide
    cdef public double peak_attn
    cdef public double peak_dense
    cdef public double proj_flops
    cdef public double q_tok
    cdef public bint sliding
    cdef public double state
    cdef public double tp
    cdef public double w_bytes
    cdef public double window

@cython.locals(ctx_mean=num, by_layer=num, in_window=num, flops=num)
cpdef num attention_ctx_flops(work_t w, num context, object mn=*)

@cython.locals(ctx_end=num, by_layer=num, in_window=num, kv_read=num, attn_bytes=num)
cpdef num attention_bytes(work_t w, num context, object mn=*)

@cython.locals(compute=num, memory=num)
cpdef num attention_s(work_t w, num context, object mx=*, object mn=*)

cpdef num attention_compute_s(work_t w, num context, object mn=*)

cpdef num attention_memory_s(work_t w, num context, object mn=*)

@cython.locals(stage_s=num, hidden=num)
cpdef num overlap_stage(num t_cm, num network_s, num latency_s, object overlap, num fraction,
                        object mn=*)

@cython.locals(ctx_mean=num, ctx_end=num, mean_in=num, end_in=num)
cpdef tuple request_terms(num q_tok, num cached, num ctx_flops, num n_full, num n_slide,
                          num window, num kv_layer, object sliding, object mn=*)
