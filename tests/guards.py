"""The one bound on a test's waits — a subprocess, a launch, a poll loop, a process group: a guard against a hang,
far above what the work takes on a loaded 2-core machine and never what a test measures (the suite's own
``timeout`` in ``pyproject.toml`` is twice it). A test must not fail because the machine is busy."""

GUARD_S = 900
