# Compiled as it is (setup.py compiles the modules with a .pxd beside them): the
# samples' walks over the workers' states (`Sampler._walk`, `HbmPeak.sample`) run as C.
# Typing the walk's locals measured no better (its time is in reading the states'
# attributes, Python objects).
