import cython

@cython.locals(count=Py_ssize_t, res=double, r0=double, r1=double, r2=double, r3=double,
               r4=double, r5=double, r6=double, r7=double, i=Py_ssize_t, j=Py_ssize_t,
               end=Py_ssize_t, n2=Py_ssize_t, head=list)
cpdef double pairwise_sum(list a, Py_ssize_t lo=*, object n=*)
