"""The system programs a make target needs, installed when missing, or else the exact commands to run.

``make demo`` needs the Cloud Spanner Emulator; ``make dev`` also Redis (the warm run workers'
broker); ``make test`` also Chromium (the ``dagster dev`` UI test) and PostgreSQL (the production
stack test); ``make stack`` the emulator, PostgreSQL and Redis. On Debian, as root or with password-less sudo, a missing one is installed with
apt-get when apt knows its package. Otherwise this stops before any work, printing the commands
that install it: the emulator's package comes from Google's Cloud SDK repository, which a machine
may not have configured.

    python -m cs_platform.dev.prerequisites emulator chromium postgresql redis
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Callable, Sequence

from cs_platform.dev.emulator import EmulatorNotInstalledError, find_emulator_binary
from cs_platform.dev.postgres import PostgresNotInstalledError, postgres_bin
from cs_platform.dev.redis import RedisNotInstalledError, redis_server_binary

APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
GOOGLE_CLOUD_REPOSITORY = (
    "add Google's Cloud SDK apt repository as https://cloud.google.com/sdk/docs/install#deb says "
    "(or, with the gcloud CLI: gcloud components install cloud-spanner-emulator)"
)


def _emulator_found() -> bool:
    try:
        find_emulator_binary()
    except EmulatorNotInstalledError:
        return False
    return True


def _postgres_found() -> bool:
    try:
        postgres_bin()
    except PostgresNotInstalledError:
        return False
    return True


def _redis_found() -> bool:
    try:
        redis_server_binary()
    except RedisNotInstalledError:
        return False
    return True


def _chromium_found() -> bool:
    return bool(shutil.which("chromium") or shutil.which("chromium-browser"))


@dataclass(frozen=True)
class Requirement:
    what: str  # what it is and who needs it, for the messages
    package: str  # its Debian package
    found: Callable[[], bool]
    repository: str | None = None  # how to get the package when apt does not know it


REQUIREMENTS = {
    "emulator": Requirement("the Cloud Spanner Emulator", "google-cloud-cli-spanner-emulator", _emulator_found, GOOGLE_CLOUD_REPOSITORY),
    "chromium": Requirement("Chromium (the dagster dev UI test)", "chromium", _chromium_found),
    "postgresql": Requirement("PostgreSQL (Dagster's production instance: make stack and its test)", "postgresql", _postgres_found),
    "redis": Requirement("Redis (the warm run workers' broker: make dev, make stack and their tests)", "redis-server", _redis_found),
}


def privileged_prefix() -> list[str] | None:
    """How to run apt-get here: as we are (root), through password-less sudo, or not at all (None)."""
    if os.geteuid() == 0:
        return []
    sudo = shutil.which("sudo")
    if sudo and subprocess.run([sudo, "-n", "true"], capture_output=True).returncode == 0:
        return [sudo, "-n"]
    return None


def _apt_knows(package: str) -> bool:
    policy = subprocess.run(["apt-cache", "policy", package], capture_output=True, text=True, env=APT_ENV)
    return policy.returncode == 0 and "Candidate:" in policy.stdout and "Candidate: (none)" not in policy.stdout


def _apt(out, *command: str) -> None:
    """Run an apt-get command quietly; what it said is shown only when it failed."""
    done = subprocess.run(command, env=APT_ENV, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        print(f"{' '.join(command)} failed ({done.returncode}):\n  " + "\n  ".join(said[-15:]), file=out)


def _commands(missing: Sequence[Requirement]) -> str:
    sudo = "" if os.geteuid() == 0 else "sudo "
    lines = [f"  {r.package}: {r.repository}, then" for r in missing if r.repository]
    lines.append(f"  {sudo}apt-get update && {sudo}apt-get install -y {' '.join(r.package for r in missing)}")
    return "\n".join(lines)


def ensure(
    names: Sequence[str], requirements: dict[str, Requirement] = REQUIREMENTS, apt_prefix: Callable[[], list[str] | None] = privileged_prefix, out=sys.stderr
) -> bool:
    """Install what ``names`` need and is missing; True once everything is there. ``apt_prefix``
    says how apt-get may run here (None: it may not, so only say how)."""
    missing = [requirements[n] for n in names if not requirements[n].found()]
    if not missing:
        return True
    print(f"missing: {', '.join(r.what for r in missing)}", file=out)
    prefix = apt_prefix() if shutil.which("apt-get") else None
    if prefix is not None:
        print(f"installing {' '.join(r.package for r in missing)} with apt-get (a minute or two)", file=out)
        _apt(out, *prefix, "apt-get", "update", "-qq")
        installable = [r for r in missing if _apt_knows(r.package)]
        if installable:
            _apt(out, *prefix, "apt-get", "install", "-y", "-qq", *(r.package for r in installable))
        missing = [r for r in missing if not r.found()]
    if missing:
        print(f"still missing: {', '.join(r.what for r in missing)}. Install it and run make again:\n{_commands(missing)}", file=out)
        return False
    print("installed", file=out)
    return True


def main(argv: Sequence[str]) -> int:
    unknown = sorted(set(argv) - set(REQUIREMENTS))
    if unknown or not argv:
        print(f"usage: python -m cs_platform.dev.prerequisites {' | '.join(REQUIREMENTS)} …", file=sys.stderr)
        return 2
    return 0 if ensure(argv) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
