"""What a make target needs from the system: found, or installed, or the exact commands to run."""

import io
import subprocess
import sys

from cs_platform.dev.prerequisites import REQUIREMENTS, Requirement, ensure


def test_a_missing_program_that_cannot_be_installed_stops_with_the_commands_that_install_it():
    missing = Requirement("the Cloud Spanner Emulator", "google-cloud-cli-spanner-emulator", lambda: False, "add the vendor's repository")
    out = io.StringIO()
    assert not ensure(["emulator"], {"emulator": missing}, apt_prefix=lambda: None, out=out)
    text = out.getvalue()
    assert "still missing: the Cloud Spanner Emulator" in text
    assert "google-cloud-cli-spanner-emulator: add the vendor's repository, then" in text
    assert "apt-get install -y google-cloud-cli-spanner-emulator" in text


def test_what_is_there_is_left_alone():
    out = io.StringIO()
    present = Requirement("a program", "some-package", lambda: True)
    assert ensure(["x"], {"x": present}, apt_prefix=lambda: [], out=out) and out.getvalue() == ""


def test_the_command_line_finds_the_emulator_the_suite_runs_on():
    """The make targets call this first; the emulator the suite runs on is found."""
    assert REQUIREMENTS["emulator"].found()
    done = subprocess.run([sys.executable, "-m", "cs_platform.dev.prerequisites", "emulator"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    wrong = subprocess.run([sys.executable, "-m", "cs_platform.dev.prerequisites", "emulater"], capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "usage" in wrong.stderr
