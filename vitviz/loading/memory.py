"""How much memory this process may use, and whether a model of a given size fits in it.

Loaders check a model's size from its numbers (config or file header) before allocating anything, so a model
too big for the machine, or a hostile config asking for an absurd one, is refused with a message instead of an
out-of-memory crash.
"""

from __future__ import annotations

import os


def machine_memory() -> int:
    """The memory this process may use: the machine's RAM, or a container's (cgroup) limit when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = open(limit_file).read().strip()
        except OSError:
            continue
        if text.isdigit():
            total = min(total, int(text))
    return total


def available_memory() -> int:
    """Memory free for a new model now: /proc/meminfo's MemAvailable (capped by a container's limit), else the
    machine's memory where the system does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return min(int(line.split()[1]) * 1024, machine_memory())
    except OSError:
        pass
    return machine_memory()


def gigabytes(size: int) -> str:
    return f"{size / 1e9:.1f} GB"
