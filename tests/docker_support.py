"""Docker images the tests need that no build step makes."""

from __future__ import annotations

import io
import tarfile
from typing import Any

EMPTY_IMAGE = "wharf-test/empty:1"


def empty_image(client: Any) -> str:
    """An image with no files: enough to create (never start) a container. Made on first use,
    so a test never depends on another having run before it."""
    from docker.errors import ImageNotFound

    try:
        client.images.get(EMPTY_IMAGE)
    except ImageNotFound:
        buffer = io.BytesIO()
        tarfile.open(fileobj=buffer, mode="w").close()
        repository, tag = EMPTY_IMAGE.split(":")
        client.api.import_image_from_data(buffer.getvalue(), repository=repository, tag=tag)
    return EMPTY_IMAGE
