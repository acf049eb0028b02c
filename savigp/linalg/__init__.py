"""The linear algebra the model shares: Cholesky factorizations whose jitter grows only when one
fails (:mod:`~savigp.linalg.cholesky`), blocked triangular products and solves
(:mod:`~savigp.linalg.triangular`) and the row chunks that keep work within a memory budget
(:mod:`~savigp.linalg.chunks`)."""
