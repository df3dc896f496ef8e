"""One base class for every error that means "bad input or an unusable model/engine": the CLI prints it as one line."""


class GradusError(RuntimeError):
    pass


class SourceError(GradusError, ValueError):
    """A source that cannot be read at all (missing file, unknown format, bad mapping): one-line message."""
