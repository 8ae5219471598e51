"""The project's errors, in two families as in delta/dlt: :class:`TransientError` (retrying the same
call may succeed: the reader backs off and resumes from its last safe point) and
:class:`TerminalError` (retrying cannot help: stop and tell the user what to fix). Every message
names the offending thing and the fix. Each package raises its own named subclasses (the reader
core's are in ``cs_platform.changestream.errors``); code that must tell ours from anything else
catches :class:`CsPlatformError`.
"""

from __future__ import annotations


class CsPlatformError(Exception):
    """Base of every error this project raises.

    ``fixed_by`` names what the caller passed that would fix the error, in the raising code's own
    words, so that the reader core knows no setting: ``stream``, ``start``, ``end`` (the stream's
    name and time range), ``timeout`` (Spanner's deadline) and ``start_over`` (the stream must be
    started anew). The layer that turns settings into those arguments adds the settings' names and
    the command (``cs_platform.settings.naming_settings``).
    """

    def __init__(self, *args: object, fixed_by: tuple[str, ...] = ()) -> None:
        super().__init__(*args)
        self.fixed_by = fixed_by


class TransientError(CsPlatformError):
    """Raised when a call failed in a way that a retry from the last safe point can fix."""


class TerminalError(CsPlatformError):
    """Raised when retrying cannot help; the message says what to change."""


class InvalidArgumentError(TerminalError, ValueError):
    """Raised when a setting or an argument is outside what it accepts (the message names the setting)."""
