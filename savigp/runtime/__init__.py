"""How the engine runs on its machine: the glibc allocator's settings
(:mod:`~savigp.runtime.allocator`), the number of threads (:mod:`~savigp.runtime.threads`),
``torch.compile`` of the hot kernels (:mod:`~savigp.runtime.compilation`) and the step without
host synchronization (:mod:`~savigp.runtime.sync_free`)."""
