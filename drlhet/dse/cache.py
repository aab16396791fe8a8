"""`ProfileCache`: profiles as JSON, reused until the machine or the package changes.

docs/design.md section 5. A cache is a folder the caller names (the CLI reads the user's cache
folder from the environment; nothing here does); its file ``profiles-<fingerprint>.json`` holds
one profile per `drlhet.dse.key.ProfileKey` name.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

import jax

from drlhet.backends import native
from drlhet.dse.key import ProfileKey

__all__ = ["ProfileCache", "fingerprint"]


def fingerprint() -> str:
    """Machine and package identity: profiles are reused only while it is unchanged (the host,
    its CPU, JAX's version, every source file of the package and the native kernel library)."""
    parts = [platform.node(), platform.machine(), platform.processor(), str(os.cpu_count())]
    try:
        with open("/proc/cpuinfo") as f:
            parts += sorted({ln for ln in f if ln.startswith("model name")})
    except OSError:
        pass
    parts += [jax.__version__, jax.lib.__version__ if hasattr(jax, "lib") else ""]
    here = Path(__file__).resolve().parents[1]
    for path in sorted(here.rglob("*.py")):
        parts.append(hashlib.sha1(path.read_bytes()).hexdigest())
    try:
        parts.append(hashlib.sha1(native.library_path().read_bytes()).hexdigest())
    except Exception:  # noqa: BLE001 - no native library built: nothing to fingerprint
        parts.append("no kernel library")
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


class ProfileCache:
    """Profiles as JSON files ``<directory>/profiles-<fingerprint>.json`` (one dict per key
    name).

    Args:
      directory: the cache folder (created on the first `put`).
      fp: the fingerprint (default: `fingerprint` of this machine and package).
    """

    def __init__(self, directory: Path, fp: str | None = None):
        self.directory = Path(directory)
        self.path = self.directory / f"profiles-{fp or fingerprint()}.json"

    def load(self) -> dict[str, dict]:
        """Every cached profile by key name (empty when there is no file).

        Raises:
          ValueError: the file is corrupt (the message says to delete it).
        """
        if not self.path.exists():
            return {}
        try:
            data = json.loads(self.path.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"profile cache {self.path} is corrupt ({e}); delete it") from e
        if not isinstance(data, dict):
            raise ValueError(f"profile cache {self.path} is corrupt (not an object); delete it")
        return data

    def get(self, key: ProfileKey) -> dict | None:
        """The profile of ``key``, or None."""
        return self.load().get(key.name())

    def put(self, key: ProfileKey, profile: dict) -> None:
        """Stores ``profile`` as the profile of ``key`` (atomically replaces the file)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        data = self.load()
        data[key.name()] = profile
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(self.path)
