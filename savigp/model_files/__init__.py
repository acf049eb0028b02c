"""Model files: save a trained :class:`~savigp.model.SAVIGP` and rebuild it without its data.

The pieces: :mod:`.file_format` (writing and reading the file; :mod:`.pickle_scan` bounds what its
pickle would build before it is unpickled), :mod:`.migrations` (format versions and
the upgrades of files written by earlier versions), :mod:`.kernel_record` (the kernel as data),
:mod:`.schema` (every configuration field checked), :mod:`.user_code` (importing user code with
consent), :mod:`.likelihood_spec` (the likelihood a file describes), :mod:`.builder` (the model
around the state dict), :mod:`.saved_model` (:class:`SavedModel`, :func:`save`, :func:`load`).

A model file is a ``torch.save`` of a dict of tensors and plain Python values only, so it loads
with ``torch.load(path, weights_only=True)``::

    {
      "config":         plain dict (below),
      "state_dict":     SAVIGP.state_dict() (tensors, on the CPU),
      "training_state": None or {"optimizer": optimizer.state_dict(), "generator": ByteTensor
                        (torch.Generator state), "perm": LongTensor (N,), "pos": int},
    }

``config`` holds everything needed to rebuild the module around the state dict and to use it:

* ``"model"``: SAVIGP's own ``config`` (input_dim D, num_data N, num_latent Q, num_inducing M,
  dense, learn_inducing, posterior, num_components, learn_prior_mean, mean_basis_size, mean_basis,
  entropy, entropy_samples);
* ``"model_options"``: kernel (its spec, data; format 5: :mod:`.kernel_record`), fourier_features (F, for
  a model whose inducing variables are Fourier features, else absent), inducing_init, seed, dtype name, prior_mean;
* ``"likelihood"``: ``{"name", "class", "kwargs"}`` for a class of :mod:`likelihoods`, or
  ``{"name": "callable" | "user-class", "class", "import_path", "sha256", "kwargs"}`` for a user
  function or ``Likelihood`` subclass (see :mod:`savigp.user_likelihood`): where it was and the
  SHA-256 of its file at training (``"code_kwargs"``: the same for further functions given to its
  constructor, e.g. ``{"mean_fn": {"import_path", "sha256"}}``);
* ``"standardize"``: ``{"inputs": None | {"mean": [D floats], "std": [D floats]},
  "targets": None | {"mean": [P floats], "std": [P floats]}}``, undone at prediction;
* ``"example_target"``: one valid target row (P floats), used to build the placeholder data;
* ``"class_labels"``: the label of each class (classification) or None;
* ``"columns"``, ``"training"``, ``"step"``, ``"complete"``: what the command line recorded.

The training data are not stored (``train_x``/``train_y`` are non-persistent buffers): a model
rebuilt by :func:`~savigp.model_files.builder.rebuild_model` without data holds placeholders and can predict, not train.

**Trust model.** A model file is data: loading one never imports or runs anything it names.
Built-in likelihoods are found by class name among the classes :mod:`likelihoods` exports, with
keyword arguments checked against the constructor. A user function is imported only when the
caller says so: ``load(path, likelihood="my_lik.py:log_lik")`` (``--likelihood`` on the command
line; the file may have moved: a path without ``:function`` keeps the recorded function name) or
``load(path, trust_code=True)`` (``--trust-code``: import what the file names). Either way the
bytes that run are the bytes hashed (:func:`~savigp.model_files.user_code.load_code`), refused
unless ``trust_code=True`` when their SHA-256 differs from the recorded one or none was recorded. Without either, the model loads with its latent
functions only: ``predict`` gives latent means and variances, and evaluation says what to pass.
Every configuration field is checked (type, range, size against the state dict, memory needed;
:mod:`savigp.model_files.schema`) before a tensor is allocated, and every stored tensor must hold
the elements it claims, without NaN or values whose square overflows; the rebuilt model's
parameters must be finite (also after their transforms).
"""
from .builder import build_model, rebuild_model, standardization_stats
from .errors import CodeNotAuthorized, LikelihoodImportError, ModelFileError
from .file_format import FORMAT, READABLE_VERSIONS, VERSION, atomic_torch_save, plain, read_model_file, save_model
from .likelihood_spec import builtin_likelihood_class, likelihood_spec, make_likelihood, resolve_likelihood
from .saved_model import SavedModel, load, load_model, save
from .user_code import authorized_import, canonical_import_path, code_reference, file_sha256, import_callable

__all__ = [
    "FORMAT", "VERSION", "READABLE_VERSIONS", "ModelFileError", "LikelihoodImportError", "CodeNotAuthorized",
    "SavedModel", "save", "load", "load_model", "save_model", "read_model_file", "atomic_torch_save", "plain",
    "build_model", "rebuild_model", "standardization_stats", "make_likelihood", "likelihood_spec",
    "resolve_likelihood", "builtin_likelihood_class", "import_callable", "canonical_import_path",
    "code_reference", "authorized_import", "file_sha256",
]
