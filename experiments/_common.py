"""What every experiment's JSON says about the run that wrote it (docs/measuring.md: the machine,
the versions and the run's parameters beside every number): `run_info`, one object per process,
the same in every row of a run, so that rows of two runs never read as one.

Imports no jax (a script may set up its threading before jax is imported): the versions are
the installed packages' metadata, the commit is git's.
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

__all__ = ["run_info", "cpu_model"]

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("drlhet", "jax", "jaxlib", "numpy")
"""The packages whose versions every run records (a script adds its peers')."""


def run_info(*extra_packages: str) -> dict:
    """This run: ``started_utc`` (when it was first asked, once per process: a run's id),
    ``command`` (the script and its options as given: with ``commit``, the run's parameters),
    ``commit`` (git's, ``+dirty`` with uncommitted changes to tracked files; None outside a
    checkout), ``machine`` (``cpu``, ``cores``, ``cores_usable``: this process's affinity,
    ``host``) and ``versions`` (Python, `PACKAGES` and ``extra_packages``; None: not
    installed)."""
    info = dict(_run())
    info["versions"] = {**info["versions"], **_versions(extra_packages)}
    return info  # a fresh dict each call: a row's may be changed without changing another's


@functools.cache
def _run() -> dict:
    script = Path(sys.argv[0])
    with_repo = script.resolve().is_relative_to(REPO) if script.name else False
    shown = str(script.resolve().relative_to(REPO)) if with_repo else str(script)
    return {
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": shlex.join([shown, *sys.argv[1:]]),
        "commit": _commit(),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)),
            "host": platform.node(),
        },
        "versions": {"python": platform.python_version(), **_versions(PACKAGES)},
    }


@functools.cache
def _versions(packages: tuple[str, ...]) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in packages:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _commit() -> str | None:
    """git's commit of this checkout, ``+dirty`` when tracked files differ from it; None where
    there is no git or no checkout (a copy of the tree on another machine)."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=20
        )
        if done.returncode:
            raise OSError(done.stderr)
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short=12", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), or what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
