"""Errors the command line turns into one clear line and an exit status."""


class UsageError(Exception):
    """Bad input from the user: exit status 2, one line on stderr, no traceback."""


class EnvironmentSkip(Exception):
    """A release that cannot be probed here (no wheel, install failed): verdict *skip*."""


class HarnessError(Exception):
    """The harness cannot go on (results cannot be written, ...): exit status 1, one line."""


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread where Ctrl-C raises KeyboardInterrupt: every handler that ends the
    workers and keeps the finished probes on Ctrl-C does the same on SIGTERM (exit status 143, not 130)."""
