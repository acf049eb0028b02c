"""Model selection: searches that propose candidate models over one candidate loop, above the
training (:mod:`savigp.training`'s ``fit`` knows nothing of searches).

* :mod:`savigp.selection.candidates`: the loop -- a candidate fitted to convergence by fit's rule
  within a time budget, scored by its full-data ELBO and standard error (less a penalty), rejected
  with its reason when it fails (its parent as it was), compared with the incumbent by score and
  standard error, the winner kept whole;
* :mod:`savigp.selection.settle`: a candidate settled at its optimum by L-BFGS;
* :mod:`savigp.selection.kernel_search`: :func:`search_kernels`, proposing kernel structures
  (Duvenaud et al. 2013), written in :mod:`savigp.selection.kernel_proposals` (expressions as sums
  of products, their expansions, a candidate's starting values);
* :mod:`savigp.selection.components`: :func:`choose_components`, proposing K + 1 mixture components
  by a birth (:func:`grow`) and restarts;
* :mod:`savigp.selection.front`: the public :func:`savigp.fit` (``max_components`` runs the K search).

A new search is a module here that proposes :class:`~savigp.selection.candidates.Candidate` s to
:class:`~savigp.selection.candidates.CandidateLoop` (docs/architecture.md).
"""
