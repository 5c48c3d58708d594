"""Why an export stopped; the CLI prints the message (which names the file, key or option) and exits 1."""


class ExportError(RuntimeError):
    """An export that cannot go on; nothing was written to the repository."""


class CheckpointError(ExportError, ValueError):
    """A checkpoint cannot be used for a model: the message names the file and the problem."""


class ParityError(ExportError):
    """The exported model disagrees with torch beyond the tolerance."""


class OptimizerUnavailable(ExportError):
    """The chosen optimizer or verification device is not installed here; the message says what to install."""
