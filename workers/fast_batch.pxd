import cython
from costmodel.terms cimport request_terms

@cython.locals(q_dec=double, f_dec=double, f_pre=double, n_full=double, n_slide=double,
               window=double, kv_layer=double, sliding=bint, q=double, cached=double,
               ctx=double, kv=double, d=bint)
cpdef request_lists(object lt, double q_dec, object new_tokens, object cached_tokens,
                    object decoding, list ctx_terms, list kv_terms, list q_tok, list dec,
                    list flags)
