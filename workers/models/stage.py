"""`python -m workers.models.stage`: copy one OSS / OBS / S3 model folder, or a hub model, into a
given folder, with the nodes' own staging code (workers.models.storage, workers.models.hub) and
without a database: the init container of a Kubernetes pod runs it (contracts.kube.pod_template) to
fill the folder its engine mounts.

    python -m workers.models.stage --into /staged/0 [--endpoint URL] oss://bucket/prefix/
    python -m workers.models.stage --into /staged/1 [--endpoint URL] [--commit SHA] hf://org/name@main

A hub model's token comes from WHARF_HUB_TOKEN (the service's Secret), its endpoint from
`--endpoint`, else WHARF_HF_ENDPOINT / WHARF_MODELSCOPE_ENDPOINT, else the hub's own.

Endpoint, credentials, addressing style and region come from the environment as on a node
(WHARF_<SCHEME>_ENDPOINT, _ACCESS_KEY_ID, _ACCESS_KEY_SECRET, _ADDRESSING_STYLE, _REGION; see
contracts.object_store), which a pod takes from Secrets: never from its manifest. `--endpoint`
wins over WHARF_<SCHEME>_ENDPOINT, as a storage entry's endpoint does. Progress goes to stdout
(the pod's log); a failure is one line on stderr, without a secret in it, and exit status 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from contracts.hub_refs import ENDPOINTS, is_hub_ref, parse_hub_ref
from contracts.object_store import ObjectSource, StagingError, source_from_env
from workers.models import hub
from workers.models.storage import cache_key, stage

# The version stage() files an earlier copy under (any 16 hex digits do): it only looks for
# unchanged files to link there, and never serves it as current.
EARLIER = "0" * 16


def stage_into(
    source: ObjectSource, into: Path, progress: Callable[[int, int], None] | None = None
) -> Path:
    """Copy `source` into the folder `into`, whose parent must exist and be writable; return it.

    The copy is made in a cache folder beside `into` and renamed into place, so `into` appears
    whole or not at all. A copy already at `into` (an earlier run in the same pod: its volume
    outlives a restarted init container) goes back into that cache first, so that stage()
    links its unchanged files instead of downloading them again; a failed run leaves that cache
    for the next run to link from. Raises StagingError."""
    cache = into.parent / f".{into.name}.cache"
    try:
        if into.is_dir():
            cache.mkdir(exist_ok=True)
            os.rename(into, cache / f"{cache_key(source)}@{EARLIER}")
        staged = stage(source, cache, progress)
        os.rename(staged, into)
    except OSError as exc:
        raise StagingError(f"cannot write {into}: {exc}") from exc
    shutil.rmtree(cache, ignore_errors=True)  # the earlier copy, if any, and the lock file
    return into


def stage_hub_into(
    ref: str, into: Path, endpoint: str | None, commit: str | None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:  # fmt: skip
    """Stage hub model `ref` (at `commit`, else where its revision is now) into the folder
    `into`, through a hub cache beside it that a failed run leaves for the next to continue
    and a finished one removes. Raises HubError."""
    if into.is_dir():  # an earlier run in the same pod finished
        return into
    parsed = parse_hub_ref(ref)
    endpoint = endpoint or os.environ.get(f"WHARF_{parsed.scheme.upper()}_ENDPOINT")
    cache = into.parent / f".{into.name}.hub"
    folder, _ = hub.stage_hub(
        parsed, cache, token=os.environ.get("WHARF_HUB_TOKEN") or None,
        endpoint=endpoint or ENDPOINTS[parsed.scheme], commit=commit, progress=progress,
    )  # fmt: skip
    try:
        os.rename(folder, into)
    except OSError as exc:
        raise hub.HubError(f"cannot write {into}: {exc}") from exc
    shutil.rmtree(cache, ignore_errors=True)
    return into


def printer(uri: str, every: float = 1.0) -> Callable[[int, int], None]:
    """A progress callback that prints a line at most every `every` seconds, and at the end."""
    last = [float("-inf")]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= every or done >= total:
            last[0] = now
            percent = 100 * done // total if total else 100
            print(f"staging {uri}: {percent}% of {total / 1e9:.2f} GB", flush=True)

    return progress


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m workers.models.stage",
        description="Copy an OSS/OBS/S3 folder or a hub model into a local folder (a pod's "
        "model volume).",
    )
    parser.add_argument("--into", required=True, type=Path, help="the folder to create")
    parser.add_argument("--endpoint", help="the store's endpoint; else WHARF_<SCHEME>_ENDPOINT")
    parser.add_argument("--commit", help="a hub model's commit (its version records it)")
    parser.add_argument("uri", help="oss://bucket/prefix/, obs://…, s3://…, hf://org/name[@rev] "
                        "or modelscope://org/name[@rev]")  # fmt: skip
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    try:
        if is_hub_ref(args.uri):
            folder = stage_hub_into(args.uri, args.into, args.endpoint, args.commit,
                                    printer(args.uri))  # fmt: skip
        else:
            folder = stage_into(source_from_env(args.uri, args.endpoint), args.into,
                                printer(args.uri))  # fmt: skip
    except (StagingError, hub.HubError, ValueError) as exc:
        print(f"staging {args.uri} failed: {exc}", file=sys.stderr)
        return 1
    print(f"staged {args.uri} into {folder}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
