"""``python -m cs_platform.reset STREAM``: start a change stream over, from the configured settings.

Drops the stream's partition metadata table and removes its landing files and its lake (changelog,
mirrors, manifest, quarantine). The next partition sensor tick initializes the stream again from
CS_PLATFORM_START_TIMESTAMP (or now) as a new epoch. Use it after changing the start or end of a
stream, or to move a lake to another source. It asks for the stream name to be typed back unless
``--yes`` is given. Reads the same environment as the Dagster definitions.
"""

from __future__ import annotations

import argparse
import os
import sys

from cs_platform import settings
from cs_platform.lake.layout import stream_root
from cs_platform.landing.store import LandingStore
from cs_platform.settings import naming_settings
from cs_platform.stream.lake_steps import reset_stream
from cs_platform.stream.source import StreamSource


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    with naming_settings(args.stream):
        return reset(args)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m cs_platform.reset", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stream", help="the change stream to reset, as in CS_PLATFORM_CHANGE_STREAMS")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    return parser.parse_args(argv)


def reset(args: argparse.Namespace) -> int:
    settings.check_all(os.environ)  # a bad value fails here, named, before anything is removed
    source = StreamSource.from_settings(os.environ, args.stream)
    store = source.metadata_store()
    landing = LandingStore(settings.value(os.environ, "CS_PLATFORM_LANDING_ROOT"))
    lake_root = stream_root(settings.value(os.environ, "CS_PLATFORM_LAKE_ROOT"), args.stream)
    print(
        f"This removes stream {args.stream}'s metadata table {store.table} (database "
        f"{source.metadata_database}), its landing files under "
        f"{landing.location.uri(landing.stream_directory(args.stream))} and its lake {lake_root}."
    )
    if not args.yes:
        if not sys.stdin.isatty():
            print("refusing without confirmation: run it in a terminal, or pass --yes", file=sys.stderr)
            return 2
        if input(f"Type the stream name ({args.stream}) to confirm: ").strip() != args.stream:
            print("not confirmed: nothing was removed")
            return 1
    result = reset_stream(lake_root, landing, args.stream, store)
    print(
        f"reset {args.stream}: lake {'removed' if result.lake_removed else 'was absent'}, landing "
        f"{'removed' if result.landing_removed else 'was absent'}, metadata table "
        f"{'dropped' if result.metadata_dropped else 'was absent'}. The next sensor tick starts it afresh."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
