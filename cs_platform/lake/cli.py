"""``cs-platform-lake``: the published cuts of a stream's lake, and statements that open one, without Spark.

    cs-platform-lake cuts .demo/lake/BankStream            # every kept cut, and its mirror versions
    cs-platform-lake open .demo/lake/BankStream --engine duckdb [--cut 2026-11-25T07:00:00+00:00]
    cs-platform-lake open .demo/lake/BankStream --history [--latest]
    cs-platform-lake features .demo/lake/BankStream       # the Delta protocol of every table

``open`` prints statements for Spark SQL, DuckDB or Trino that define one view per mirror, pinned
at the cut (the latest by default); paste them into that engine. With ``--history`` the views read
the history tables at their latest version, filtered at the cut (``--latest``: at whatever cut is
the latest when they are queried), which engines without time travel can do too. Everything is
read from the manifest's Delta log (``published``).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime

from cs_platform.lake.engines import ENGINES, CutTables, MissingReaderError, history_statements, statements, table_protocols
from cs_platform.lake.published import CutNotFoundError, PublishedCut, lake_location, manifest_log, published_cut, published_cuts
from cs_platform.storage.location import Location


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cs-platform-lake", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    cuts = commands.add_parser("cuts", help="list the kept cuts, oldest first")
    cuts.add_argument("lake", help="a stream's lake: <CS_PLATFORM_LAKE_ROOT>/<stream>, a directory or gs:// URI")
    cuts.add_argument("--json", action="store_true", help="one JSON object per cut")
    opened = commands.add_parser("open", help="print statements that open every mirror of one cut")
    opened.add_argument("lake", help="a stream's lake: <CS_PLATFORM_LAKE_ROOT>/<stream>, a directory or gs:// URI")
    opened.add_argument("--engine", choices=ENGINES, default="duckdb")
    opened.add_argument("--cut", type=_timestamp, help="the cut's timestamp as `cuts` lists it (default: the latest)")
    opened.add_argument(
        "--history", action="store_true", help="views over the history tables at their latest version, filtered at the cut (no time travel)"
    )
    opened.add_argument("--latest", action="store_true", help="with --history: views that always hold the latest published cut")
    features = commands.add_parser("features", help="the Delta protocol of every table: what a reader must support")
    features.add_argument("lake", help="a stream's lake: <CS_PLATFORM_LAKE_ROOT>/<stream>, a directory or gs:// URI")
    args = parser.parse_args(argv)
    try:
        location = _lake(args.lake)
        if args.command == "cuts":
            for cut in published_cuts(location):
                print(cut.to_json() if args.json else f"{cut.cut.isoformat()}  {_versions(cut)}")
        elif args.command == "features":
            for table, p in table_protocols(location).items():
                print(
                    f"{table}: reader {p.min_reader_version} [{', '.join(p.reader_features) or '-'}], writer {p.min_writer_version} "
                    f"[{', '.join(p.writer_features) or '-'}], timestamps {', '.join(p.timestamp_types) or '-'}"
                )
        elif args.history:
            tables = CutTables.of(location, published_cut(location, args.cut))
            if not tables.histories:
                raise NotALakeError(f"{args.lake} keeps no history table: set CS_PLATFORM_HISTORY_TABLES (docs/reading.md)")
            print(history_statements(tables, args.engine, latest=args.latest), end="")
        else:
            print(statements(CutTables.of(location, published_cut(location, args.cut)), args.engine), end="")
    except (CutNotFoundError, MissingReaderError, NotALakeError) as e:
        print(f"cs-platform-lake: {e}", file=sys.stderr)
        return 2
    return 0


class NotALakeError(ValueError):
    """The path given holds no manifest."""


def _lake(root: str) -> Location:
    location = lake_location(root)
    if not manifest_log(location).exists():
        raise NotALakeError(
            f"no manifest at {manifest_log(location).uri}: give a stream's lake, <CS_PLATFORM_LAKE_ROOT>/<stream> "
            "(for make demo: .demo/lake/BankStream), after its first cut"
        )
    return location


def _timestamp(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no time zone: give it as `cuts` prints it (with +00:00)")
    return value


def _versions(cut: PublishedCut) -> str:
    """Each mirror at its version; a frozen one (its table left the stream) says since which cut."""
    frozen = {table: f" (frozen since {since.isoformat()})" for table, since in cut.frozen.items()}
    return ", ".join(f"{table}@v{version}{frozen.get(table, '')}" for table, version in sorted(cut.versions.items()))


if __name__ == "__main__":
    sys.exit(main())
