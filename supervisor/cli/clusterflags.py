"""The flags every part of a cluster takes to reach NATS and to trust its peers: credentials
(`--nats-creds`, or `--nats-auth-file`), TLS (`--nats-tls-ca`), `--nats-insecure`, and the
cluster key (`--cluster-key-file`). Each file is read and checked before anything starts; a
problem names its flag. Nothing here imports nats (a single-machine `serve` never does)."""

from __future__ import annotations

TYPE_CHECKING = False  # as typing.TYPE_CHECKING (True to type checkers), without importing typing
if TYPE_CHECKING:
    import argparse

    from ..cluster.access import ClusterSettings, NatsAccess

#: The flags of NATS access, as `args` has them.
ACCESS_FLAGS = ("nats_creds", "nats_auth_file", "nats_tls_ca", "nats_insecure")


def add_access_arguments(p: argparse.ArgumentParser, *, key: bool = True) -> None:
    """`--nats-*`, and with `key` the cluster key's file."""
    p.add_argument(
        "--nats-creds",
        metavar="FILE",
        help="connect to NATS with this creds file (a user JWT and its seed; mode 600)",
    )
    p.add_argument(
        "--nats-auth-file",
        metavar="FILE",
        help='connect to NATS with the user in FILE (mode 600; TOML: user = "…" and'
        ' password = "…", or token = "…")',
    )
    p.add_argument(
        "--nats-tls-ca",
        metavar="FILE",
        help="trust the NATS server's TLS certificate if this CA signed it",
    )
    p.add_argument(
        "--nats-insecure",
        action="store_true",
        help="accept a NATS server that lets anyone in without credentials (warned at start)",
    )
    if key:
        p.add_argument(
            "--cluster-key-file",
            metavar="FILE",
            help="the key every gateway and worker shares (required): mode 600, at least 32"
            " random bytes as hex (openssl rand -hex 32); requests are signed with it",
        )


def nats_access_of(args: argparse.Namespace) -> NatsAccess:
    """The access the flags say; `AccessError` for a file that cannot be used."""
    from ..cluster.access import nats_access

    return nats_access(
        args.nats_creds, args.nats_auth_file, args.nats_tls_ca, insecure=args.nats_insecure
    )


def cluster_settings(args: argparse.Namespace) -> tuple[ClusterSettings | None, list[str]]:
    """For a gateway or worker (`args.cluster` given): the settings, or the problems, one
    line each naming its flag."""
    from ..cluster.access import AccessError, ClusterSettings, read_key_file

    problems = []
    access = None
    key = b""
    try:
        access = nats_access_of(args)
    except AccessError as exc:
        problems.append(str(exc))
    if access is not None and not access.has_credentials and not access.insecure:
        problems.append(
            "--cluster: NATS needs credentials: give --nats-auth-file FILE or --nats-creds"
            " FILE (docs/cluster.md), or --nats-insecure for a server without users"
        )
    if not args.cluster_key_file:
        problems.append(
            "--cluster-key-file: required: the key every gateway and worker shares"
            " (make one: umask 077; openssl rand -hex 32 > cluster.key)"
        )
    else:
        from pathlib import Path

        try:
            key = read_key_file(Path(args.cluster_key_file))
        except AccessError as exc:
            problems.append(str(exc))
    if problems or access is None:
        return None, problems
    return ClusterSettings(args.cluster, access, key), []


def own_secret_files(args: argparse.Namespace) -> list[str]:
    """The cluster's key and NATS credentials files given: a gateway's or worker's own, so
    no sandbox of a run it starts may read them (`process.deny_own_files`)."""
    names = ("cluster_key_file", "nats_auth_file", "nats_creds")
    return [str(getattr(args, name)) for name in names if getattr(args, name, None)]


def stray_access_flags(args: argparse.Namespace) -> list[str]:
    """The cluster's flags given to a `serve` without `--cluster`: each a problem."""
    given = [name for name in (*ACCESS_FLAGS, "cluster_key_file") if getattr(args, name, None)]
    return [f"--{name.replace('_', '-')}: only with --cluster" for name in given]
