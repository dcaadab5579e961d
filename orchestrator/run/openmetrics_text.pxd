# Compiled as it is (setup.py compiles the modules with a .pxd beside them): with
# `--out`, the run's metrics path (the listener's writes to the registry, the recorder's
# readings, metrics.om's text) runs as C, beside the core it reads (issue 36).
