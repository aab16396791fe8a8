"""The pipeline's stage threads still alive (test_pipeline.py, test_threads.py)."""

from __future__ import annotations

import threading

from drlhet.runtime.threads import THREAD_PREFIX


def stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(THREAD_PREFIX)]
