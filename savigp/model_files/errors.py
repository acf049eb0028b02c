"""The errors of reading model files and of importing the user code they name; each message is
one line naming the file, field or code."""


class ModelFileError(ValueError):
    """A model file that cannot be read or used; ``str(err)`` is one line naming the file."""


class LikelihoodImportError(ValueError):
    """A user likelihood ``module:function`` or ``file.py:function`` that cannot be imported."""


class CodeNotAuthorized(LikelihoodImportError):
    """A model file names user code that the caller did not allow to run."""
