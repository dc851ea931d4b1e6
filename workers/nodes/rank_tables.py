"""`python -m workers.nodes.rank_tables`: wait until a pod's Ascend rank tables are complete and
list the pod; the init container of a rank-table pod on Kubernetes runs it (contracts.kube
.pod_template), so its engine starts only once its tables name it and its peers.

    python -m workers.nodes.rank_tables --folder /etc/wharf/ranktable --pod <pod name>

The folder is the service's rank-table ConfigMap, mounted whole: the kubelet replaces its
files as the reconcile pass rewrites them (contracts.kube.rank_tables). Progress goes to
stdout (the pod's log) when it changes and every 30 s; it exits 0 once the global table's
status is `completed` and the pod's own local table is there. It waits without a limit of its
own: the Deployment's progress deadline reports a pod that never gets its tables. SIGTERM
ends it at once (exit 143), as it ends any init container.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from contracts.kube.rank_tables import COMPLETED, GLOBAL_KEY, local_key

REPEAT_S = 30.0


def state(folder: Path, pod: str) -> str:
    """ "" when the tables are complete and list `pod`; else what they wait for."""
    try:
        table = json.loads((folder / GLOBAL_KEY).read_text())
    except FileNotFoundError:
        return f"no {GLOBAL_KEY} in {folder} yet"
    except (OSError, ValueError) as exc:  # the kubelet swaps the files atomically; still:
        return f"{GLOBAL_KEY} cannot be read yet ({exc})"
    status = table.get("status") if isinstance(table, dict) else None
    if status != COMPLETED:
        return f"the rank tables are {status or 'unreadable'}"
    if not (folder / local_key(pod)).is_file():
        return f"the rank tables do not list pod {pod} yet"
    return ""


def wait(
    folder: Path, pod: str, poll_s: float = 1.0, say: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
) -> None:  # fmt: skip
    """Returns once `state` is ""; says what it waits for when that changes, and every 30 s."""
    said, said_at = "", float("-inf")
    while waiting := state(folder, pod):
        if waiting != said or clock() - said_at >= REPEAT_S:
            say(f"waiting: {waiting}")
            said, said_at = waiting, clock()
        sleep(poll_s)
    say(f"the rank tables list pod {pod}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.nodes.rank_tables",
        description="Wait until a pod's Ascend rank tables are complete and list the pod.",
    )
    parser.add_argument("--folder", required=True, type=Path, help="the mounted tables")
    parser.add_argument("--pod", required=True, help="this pod's name")
    parser.add_argument("--poll", type=float, default=1.0, help="seconds between looks")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    wait(args.folder, args.pod, args.poll, say=lambda line: print(line, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
