"""One base class for every error that means "bad input or an unusable model/engine": the CLI prints it as one line."""


class GradusError(RuntimeError):
    pass


class SourceError(GradusError, ValueError):
    """A source that cannot be read at all (missing file, unknown format, bad mapping): one-line message."""


class LinkRefused(GradusError):
    """A path gradus would write is a symbolic link: gradus writes nothing through a link (it would write the file the
    link points to, which gradus did not make)."""

    def __init__(self, path) -> None:
        super().__init__(f"{path} is a symbolic link: gradus writes no file through a link; remove it or use another "
                         "folder")


def open_no_follow(path, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symbolic link at ``path`` (``O_NOFOLLOW``) with ``LinkRefused``."""
    import errno
    import os

    try:
        return os.open(path, flags | os.O_NOFOLLOW, mode)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LinkRefused(path) from None
        raise
