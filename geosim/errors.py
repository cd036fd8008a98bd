"""User-facing errors: one line naming the file, the key and what is wrong."""


class GeosimError(Exception):
    """A mistake in the user's input. The CLI prints it as one line and exits 2."""

    def __init__(self, problem: str, *, source: str | None = None, key: str | None = None):
        self.problem = problem
        self.source = source
        self.key = key
        super().__init__(self.line())

    def line(self) -> str:
        where = ": ".join(part for part in (self.source, self.key) if part)
        return f"{where}: {self.problem}" if where else self.problem


class MissingExtraError(GeosimError):
    """A subcommand needs an optional dependency that is not installed."""

    def __init__(self, extra: str, module: str, command: str):
        super().__init__(
            f"'{command}' needs the '{extra}' extra ({module} is not installed): "
            f"pip install 'geosim[{extra}]'"
        )


def require(module: str, extra: str, command: str):
    """Import an optional heavy module, or explain which extra installs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(extra, module, command) from exc
