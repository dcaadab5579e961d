import cython
from storage.placement cimport Placement
from storage.stripes cimport Stripe

@cython.locals(slowest=dict, here=dict, present=list, helds=list, lead=Py_ssize_t,
               first=object)
cpdef tuple leading_drops(Placement placement, dict pins, object ids, object src)

@cython.locals(here=dict, copies=dict, slowest=dict, before=list, demoted=list,
               pending=list, kvs=list, helds=list)
cpdef object direct_offload(Placement placement, list sizes, dict pins, object ids,
                            list drops, object src, object protect, object new=*)

cpdef _drops_then_copy(list steps, list times_s, list ids, object place, object dropped,
                       object blob_id, object kv_bytes, object dst, Stripe stripe)

@cython.locals(known=dict, steps=list, times_s=list, stripe=Stripe)
cpdef tuple _roomy_offload(Placement placement, list sizes, list before, list demoted,
                           list kvs, list helds, object after, object src, object lower)

@cython.locals(copies=dict, steps=list, times_s=list, resident=dict, evicted=set)
cpdef object _evicting_offload(Placement placement, list sizes, dict pins, list before,
                               list demoted, list kvs, list helds, object after, object src,
                               object lower, object protect)

@cython.locals(known=dict)
cpdef Stripe _stripe(Placement placement, object dst, object held)
