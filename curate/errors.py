"""The base of errors that mean "bad input or an unusable model/engine": the CLI prints them as one line."""


class GradusError(RuntimeError):
    pass
