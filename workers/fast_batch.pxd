import cython

@cython.locals(count=Py_ssize_t, res=double, r0=double, r1=double, r2=double, r3=double,
               r4=double, r5=double, r6=double, r7=double, i=Py_ssize_t, j=Py_ssize_t,
               end=Py_ssize_t, n2=Py_ssize_t, head=list)
cpdef double pairwise_sum(list a, Py_ssize_t lo=*, object n=*)

cdef class _BatchAttention:
    cdef public double tp
    cdef public double n_full
    cdef public double n_slide
    cdef public double n_lin
    cdef public double attn_w
    cdef public double window
    cdef public double f_dec
    cdef public double f_pre
    cdef public object lin_flops
    cdef public double kv_layer
    cdef public double state_layer
    cdef public double wb_dense
    cdef public double n_layers
    cdef public object hidden
    cdef public object app
    cdef public double peak_dense
    cdef public double peak_attn
    cdef public double hbm_bw

    @cython.locals(tp=double, proj=double, attn_bytes=double)
    cpdef double _finish(self, double ctx, double kv_read, double tokens, Py_ssize_t n,
                         double ranks)
    @cython.locals(tp=double, nf=double, f_pre=double, kv_layer=double, qf=double, half=double,
                   q=double, c=double, ctx_terms=list, kv_terms=list)
    cpdef double mixed_time_s(self, list chunk_q, list chunk_c, double q_dec, list dec,
                              double q_sum, double ranks)
    @cython.locals(tp=double, nf=double, ns=double, w=double, tokens=double, f_dec=double,
                   f_pre=double, kv_layer=double, q=double, c=double, cm=double, ce=double,
                   ctx_terms=list, kv_terms=list)
    cpdef double time_s(self, list q_tok, double q_sum, list cached, object decoding,
                        double ranks)
