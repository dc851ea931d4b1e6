"""Files out of dockerd's archives (`docker cp`'s tar streams)."""

from __future__ import annotations

import io
import tarfile


def first_file(chunks, path: str, limit: int) -> bytes:
    """The first `limit` bytes of the one regular file in a tar stream (`chunks`), as
    dockerd's archive of `path` holds it; OSError when the path is no file."""
    buffer = io.BytesIO()
    for chunk in chunks:
        buffer.write(chunk)
        if buffer.tell() > limit + 64 * 1024:  # the header, the file's first `limit` bytes
            break
    buffer.seek(0)
    try:
        with tarfile.open(fileobj=buffer, mode="r|") as archive:
            member = archive.next()
            if member is None or not member.isfile():
                raise OSError(f"{path} is not a file")
            found = archive.extractfile(member)
            return found.read(limit) if found else b""
    except tarfile.TarError as exc:
        raise OSError(f"{path}: {exc}") from None
