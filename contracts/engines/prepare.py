"""An instance's `containers[].prepare` (contracts.spec_prepare): pip installs its Python
requirements, then its command starts in the same process (exec), on every runtime alike,
since each runs the plan's arguments (Docker's entrypoint and command, a pod's command and
args, a local process group). Pure.

The plan's arguments become `/bin/sh -c PREPARE_SCRIPT wharf-prepare <the command>
<requirements file> <requirement>...`: the script is fixed, and the command (the plan's own
arguments, quoted once with shlex.join) and each requirement arrive as arguments of their
own, so nothing a spec gives is ever part of a shell line it did not write itself.

Where the instance's Python is shared (a local process runs with the node's engine
virtualenv), the runtime sets WHARF_PYTHON_TARGET to a folder of the instance's own; where
the image's site-packages is not writable (an image that runs as a plain user), it is
$TMPDIR/wharf-python: pip installs there (--target) and PYTHONPATH leads to it. A failed
install exits with PREPARE_FAILED after pip's own last lines, which the node reports as the
instance's error.
"""

from __future__ import annotations

import shlex
from dataclasses import replace

from contracts.engines.plan import ContainerPlan
from contracts.spec import ServiceSpec

PREPARE_FAILED = 97  # the exit code of an install that failed (the node reads it so)
FAILED_LINE = "wharf: installing the Python requirements failed"
TARGET_ENV = "WHARF_PYTHON_TARGET"
MARKER = "wharf-prepare"  # the script's $0, in its error messages and in `ps`
PREPARE_SCRIPT = """\
run=$1; requirements=$2; shift 2
failed="wharf: installing the Python requirements failed"
py=$(command -v python3 || command -v python) || {
  echo "$failed: the image has no python3 or python" >&2; exit 97; }
echo "wharf: installing $# Python requirement(s)${requirements:+ and $requirements}"
if [ -n "$requirements" ]; then set -- -r "$requirements" "$@"; fi
if [ -z "${WHARF_PYTHON_TARGET:-}" ] && ! "$py" -c 'import os, sys, sysconfig
sys.exit(not os.access(sysconfig.get_paths()["purelib"], os.W_OK))'; then
  WHARF_PYTHON_TARGET="${TMPDIR:-/tmp}/wharf-python"  # an image that runs as a plain user
fi
if [ -n "${WHARF_PYTHON_TARGET:-}" ]; then
  set -- --target "$WHARF_PYTHON_TARGET" --upgrade "$@"
  export PYTHONPATH="$WHARF_PYTHON_TARGET${PYTHONPATH:+:$PYTHONPATH}"
fi
PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore \\
  "$py" -m pip install "$@" || { echo "$failed (pip exited $?)" >&2; exit 97; }
echo "wharf: Python requirements installed; starting the command"
eval "exec $run"
"""
MAX_REASON = 600  # characters of pip's last lines in the instance's message


def with_prepare(spec: ServiceSpec, plan: ContainerPlan) -> ContainerPlan:
    """The plan with its container's prepare in front of its command (unchanged without)."""
    prepare = spec.containers[0].prepare if spec.containers else None
    if prepare is None:
        return plan
    args = ["/bin/sh", "-c", PREPARE_SCRIPT, MARKER, shlex.join(plan.args),
            prepare.pythonRequirementsPath or "", *(prepare.pythonRequirements or [])]  # fmt: skip
    return replace(plan, args=args)


def installs(plan: ContainerPlan) -> bool:
    """Whether the plan installs Python requirements before its command (with_prepare's)."""
    return plan.args[2:4] == [PREPARE_SCRIPT, MARKER]


def progress(spec: ServiceSpec) -> str:
    """What the instance's message says while its requirements install ("" without any)."""
    prepare = spec.containers[0].prepare if spec.containers else None
    if prepare is None:
        return ""
    what = [f"{prepare.count} Python requirement{'s' if prepare.count != 1 else ''}"]
    if prepare.pythonRequirementsPath:
        what = [what[0], prepare.pythonRequirementsPath] if prepare.count else [
            f"the Python requirements of {prepare.pythonRequirementsPath}"]  # fmt: skip
    return f"installing {' and '.join(what)} before its command starts"


def failure(log_tail: str, lines: int = 4) -> str:
    """The instance's error for an install that failed: pip's last lines before the script
    said so, in one line."""
    found = [line.strip() for line in log_tail.splitlines() if line.strip()]
    last = max((i for i, line in enumerate(found) if line.startswith(FAILED_LINE)), default=None)
    pip = [line for line in found[:last] if not line.startswith("wharf: ")]  # pip's, not ours
    said = " / ".join(pip[-lines:]) if last is not None else ""
    reason = FAILED_LINE.removeprefix("wharf: ") + (f": {said}" if said else "")
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"
