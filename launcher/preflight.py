"""What `manage.py up` checks before it starts anything: each check returns one plain line
saying what is wrong and what to change, or None. A problem found here costs the user no
half-started stack to clean up and no traceback to read."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from launcher.stack import port_taken

RUNTIMES = ("docker", "process")


def port_problem(port: int, what: str, variable: str) -> str | None:
    if not 0 < port < 65536:
        return f"{variable}={port} is not a port number; choose one from 1 to 65535"
    if port_taken(port):
        return (
            f"port {port} ({what}) is already in use; stop what holds it "
            f"or set {variable} to a free port"
        )
    return None


def runtime_problem(choice: str) -> str | None:
    if choice == "kubernetes":
        return (
            "WHARF_RUNTIME=kubernetes runs services on a cluster, from workers deployed as the "
            "README's Kubernetes section shows; `make run` runs them on this machine: unset it"
        )
    if choice and choice not in RUNTIMES:
        return f"WHARF_RUNTIME={choice!r} is not a runtime; use docker or process, or unset it"
    if choice == "docker":
        from workers.runtimes.docker import DockerRuntime

        if not DockerRuntime.available():
            return "WHARF_RUNTIME=docker but no Docker daemon answers; start dockerd or unset it"
    return None


def redis_problem(url: str, variable: str = "REDIS_URL") -> str | None:
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        with client:
            client.ping()
    except (redis.RedisError, OSError, ValueError) as error:
        where = f"{variable}={redacted(url)}"
        return f"Redis at {where} does not answer ({error}); start it or fix {variable}"
    return None


def database_problem() -> str | None:
    from django.db import DatabaseError, connection

    if connection.vendor == "sqlite":  # a file in WHARF_HOME, made on first use: nothing to ask
        return None
    try:
        connection.ensure_connection()
    except DatabaseError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        return f"the database (DATABASE_URL) does not answer: {first_line}"
    return None


def redacted(url: str) -> str:
    """The URL without its password, fit to print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:******@" if parts.username else ":******@"
    return urlunsplit(parts._replace(netloc=user + netloc))
