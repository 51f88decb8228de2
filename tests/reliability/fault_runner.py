"""Runs crash-test jobs for ``test_kill_points.py``: one process imports rightreasons once, then forks a child per job.

Each line on stdin is a JSON job ``{"kind": "train" | "distill" | "cache", "config": {...}, "resume": bool,
"out": cache dir, "shard_size": images per cache shard, "env": {...}}``; the child sets ``env`` (e.g.
``RIGHTREASONS_FAULT_KILL``), runs the job and exits; the runner answers one JSON line ``{"exit": code}`` (minus the
signal's number when the child was killed). Forking a process that has imported torch (and what every run imports)
but computed nothing is safe and saves the imports for every one of the many runs. Not a test module: it runs as a
script.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import warnings

import torch
import torch.utils.tensorboard  # noqa: F401 - imported by every run's tracker: once here, not in every forked job

from rightreasons.config import from_dict
from rightreasons.apps.tasks import config_for_task
from rightreasons.distill import DistillConfig, write_teacher_cache
from rightreasons.engine import run
from rightreasons.engine.trainer import EXIT_PREEMPTED, Preempted


def _job(job: dict) -> None:
    if job["kind"] == "cache":
        write_teacher_cache(from_dict(DistillConfig, job["config"]), job["out"], shard_size=job.get("shard_size"))
    else:
        run(config_for_task(None, job["config"], f"a {job['kind']} job"), job["resume"])


def main() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    for line in sys.stdin:
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            os.environ.update(job.get("env", {}))
            code = 0
            try:
                _job(job)
            except Preempted:
                code = EXIT_PREEMPTED
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"exit": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
