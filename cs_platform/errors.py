"""The project's errors, in two families as in delta/dlt: :class:`TransientError` (retrying the same
call may succeed: the reader backs off and resumes from its last safe point) and
:class:`TerminalError` (retrying cannot help: stop and tell the user what to fix). Every message
names the offending thing and the fix. Each package raises its own named subclasses (the reader
core's are in ``cs_platform.changestream.errors``); code that must tell ours from anything else
catches :class:`CsPlatformError`.
"""

from __future__ import annotations


class CsPlatformError(Exception):
    """Base of every error this project raises."""


class TransientError(CsPlatformError):
    """Raised when a call failed in a way that a retry from the last safe point can fix."""


class TerminalError(CsPlatformError):
    """Raised when retrying cannot help; the message says what to change."""


class InvalidArgumentError(TerminalError, ValueError):
    """Raised when a setting or an argument is outside what it accepts (the message names the setting)."""
