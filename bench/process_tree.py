"""What a tree of processes uses, sampled from /proc while it runs: each process's CPU (from its
birth if it was born while sampled, from the first sample if not), its peak PSS and RSS, and its
command line. ``bench/run_launch.py`` prices a run launch with it and ``bench/freshness.py`` a live
partition. A process that lives and dies between two samples is missed."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

from suite_cpu import command_line, descendants, process_stats  # its sibling: the benches run as scripts from bench/


def memory_mb(pid: int) -> tuple[float, float] | None:
    """The process's PSS and RSS in MB, or None once it has gone."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:])
    except OSError:
        return None
    return int(fields["Pss"].split()[0]) / 1024, int(fields["Rss"].split()[0]) / 1024


@dataclass
class TreeSampler:
    """Samples the CPU, PSS and RSS of every descendant of ``roots`` (and the roots) until stopped;
    ``memory=False``: CPU alone (reading every process's memory map costs CPU itself)."""

    roots: list[int]
    every_s: float = 0.2
    memory: bool = True
    first: dict[tuple[int, int], float] = field(default_factory=dict)  # (pid, start) -> CPU at first sight
    last: dict[tuple[int, int], float] = field(default_factory=dict)
    peak_pss: dict[tuple[int, int], float] = field(default_factory=dict)
    peak_rss: dict[tuple[int, int], float] = field(default_factory=dict)
    parents: dict[tuple[int, int], int] = field(default_factory=dict)
    tree_of: dict[tuple[int, int], int] = field(default_factory=dict)  # -> its root
    commands: dict[tuple[int, int], str] = field(default_factory=dict)  # its command line at first sight
    total_pss_peak: dict[int, float] = field(default_factory=dict)  # root -> its tree's peak PSS
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        born_before: set[tuple[int, int]] | None = None
        while not self.stop.wait(self.every_s):
            processes = process_stats()
            trees = {root: ([root] if root in processes else []) + descendants(processes, root) for root in self.roots}
            seen = {(pid, processes[pid][3]) for tree in trees.values() for pid in tree}
            if born_before is None:
                born_before = seen  # alive at the start: counted from this sample, not from birth
            for root, tree in trees.items():
                total = 0.0
                for pid in tree:
                    key = (pid, processes[pid][3])
                    cpu = processes[pid][2]
                    self.first.setdefault(key, cpu if key in born_before else 0.0)
                    self.last[key] = cpu
                    self.parents[key] = processes[pid][0]
                    self.tree_of[key] = root
                    if key not in self.commands:
                        self.commands[key] = command_line(pid) or ""
                    memory = memory_mb(pid) if self.memory else None
                    if memory is not None:
                        pss, rss = memory
                        self.peak_pss[key] = max(pss, self.peak_pss.get(key, 0.0))
                        self.peak_rss[key] = max(rss, self.peak_rss.get(key, 0.0))
                        total += pss
                self.total_pss_peak[root] = max(total, self.total_pss_peak.get(root, 0.0))

    def cpu_s(self, root: int | None = None) -> float:
        return sum(self.last[key] - self.first[key] for key in self.last if root in (None, self.tree_of[key]))
