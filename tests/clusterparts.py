"""Test helpers for the cluster: a real `nats-server` with JetStream on loopback, real
`serve --cluster` gateways and `worker --cluster` workers (subprocesses), and a raw reader of
a run's subject that sees what JetStream holds, beneath any gateway."""

from __future__ import annotations

import json
import os
import re
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import psutil
import pytest
from service_client import CLI, ENV, READY_S, Server, start_server

if TYPE_CHECKING:
    from mcpx_hooks.supervisor.run.journal import RunJournal

NATS_SERVER = shutil.which("nats-server")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "cluster.md"
#: The parts' NATS users, as docs/cluster.md's config names them.
USERS = {"gateway": "mcpx-gateway", "worker": "mcpx-worker"}


def documented_authorization() -> str:
    """The `authorization` block of the nats-server config docs/cluster.md gives: the
    tests run against exactly what the docs tell operators to deploy."""
    found = re.search(r"^authorization \{\n.*?^\}\n", DOCS.read_text(), re.M | re.S)
    assert found, "docs/cluster.md lost its nats-server authorization block"
    return found.group(0)


def write_private(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def need_nats() -> str:
    """The nats-server binary; a test without one skips, saying why (fails under CI)."""
    if NATS_SERVER is None:
        why = "nats-server is not installed (Debian's nats-server; make test installs it as root)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    return NATS_SERVER


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_line(proc: subprocess.Popen[str], stream: Any, needle: str, log: Path) -> str:
    """Reads `stream` until a line holding `needle`; the process failing first fails."""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        while True:
            line = stream.readline() if sel.select(READY_S) else ""
            if not line:
                proc.kill()
                proc.wait()
                stream.close()
                raise AssertionError(f"not ready: {log.read_text() if log.exists() else ''}")
            if needle in line:
                return str(line)


def tls_files(where: Path, ca_file: Path) -> tuple[Path, Path]:
    """A CA (its certificate to `ca_file`) and a server certificate for 127.0.0.1 it
    signed, with its key: made once in `where`."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    cert_file, key_file = where / "nats-cert.pem", where / "nats-key.pem"
    if cert_file.exists():
        return cert_file, key_file
    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcpx-hooks test CA")])

    def certificate(subject: x509.Name, public: Any) -> x509.CertificateBuilder:
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(ca_name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
        )

    ca = (
        certificate(ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    loopback = x509.IPAddress(ipaddress.ip_address("127.0.0.1"))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    cert = (
        certificate(subject, key.public_key())
        .add_extension(x509.SubjectAlternativeName([loopback]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_private(key_file, pem.decode())
    return cert_file, key_file


@attrs.define
class Nats:
    """A nats-server on loopback with docs/cluster.md's users and permissions (`open`: none,
    anyone may connect), the parts' auth files and a cluster key beside its store."""

    store: Path
    port: int = attrs.field(factory=free_port)
    proc: subprocess.Popen[str] | None = None
    open: bool = False
    #: Speak TLS only, with a certificate for 127.0.0.1 signed by a CA of the test's own.
    tls: bool = False
    #: The largest message the server takes, when not its own default (1 MiB).
    max_payload: int | None = None
    #: Whether JetStream is on (off: a server the cluster cannot use).
    jetstream: bool = True
    passwords: dict[str, str] = attrs.field(
        factory=lambda: {role: secrets.token_hex(16) for role in USERS}
    )
    #: The server's accounts, instead of docs/cluster.md's users (an operator's, say).
    authorization: str | None = None
    #: Each part's creds file (`--nats-creds`), instead of its auth file.
    creds: dict[str, Path] | None = None

    @property
    def url(self) -> str:
        return f"{'tls' if self.tls else 'nats'}://127.0.0.1:{self.port}"

    @property
    def ca_file(self) -> Path:
        return self.store.parent / "nats-ca.pem"

    def client_url(self, role: str = "gateway") -> str:
        """The URL a test's own nats-py client connects with, as the `role`'s user."""
        return f"nats://{USERS[role]}:{self.passwords[role]}@127.0.0.1:{self.port}"

    def access(self, role: str = "gateway") -> Any:
        """A `NatsAccess` as the `role`'s user, for the supervisor's own code in a test."""
        from mcpx_hooks.supervisor.cluster.access import NatsAccess

        return NatsAccess(user=USERS[role], password=self.passwords[role])

    def auth_file(self, role: str) -> Path:
        path = self.store.parent / f"nats-{role}.toml"
        if not path.exists():
            text = f'user = "{USERS[role]}"\npassword = "{self.passwords[role]}"\n'
            write_private(path, text)
        return path

    @property
    def key_file(self) -> Path:
        path = self.store.parent / "cluster.key"
        if not path.exists():
            write_private(path, secrets.token_hex(32) + "\n")
        return path

    def flags(self, role: str) -> list[str]:
        """What a gateway or worker is given to take part."""
        access = (
            ["--nats-insecure"]
            if self.open
            else ["--nats-creds", str(self.creds[role])]
            if self.creds
            else ["--nats-auth-file", str(self.auth_file(role))]
        )
        tls = ["--nats-tls-ca", str(self.ca_file)] if self.tls else []
        return ["--cluster", self.url, *access, *tls, "--cluster-key-file", str(self.key_file)]

    def start(self) -> None:
        binary = need_nats()
        log = self.store.parent / "nats-server.log"
        config = self.store.parent / "nats-server.conf"
        tls = ""
        if self.tls:
            cert, key = tls_files(self.store.parent, self.ca_file)
            tls = (
                f"tls {{ cert_file: {json.dumps(str(cert))}, key_file: {json.dumps(str(key))} }}\n"
            )
        config.write_text(
            f"listen: 127.0.0.1:{self.port}\n"
            + (
                f"jetstream {{ store_dir: {json.dumps(str(self.store))} }}\n"
                if self.jetstream
                else ""
            )
            + (f"max_payload: {self.max_payload}\n" if self.max_payload else "")
            + tls
            + ("" if self.open else self.authorization or documented_authorization())
        )
        env = {
            **os.environ,
            # Quoted, as docs/cluster.md says (nats-server reads each as a config value).
            "MCPX_GATEWAY_PASSWORD": f'"{self.passwords["gateway"]}"',
            "MCPX_WORKER_PASSWORD": f'"{self.passwords["worker"]}"',
        }
        with log.open("a") as err:
            self.proc = subprocess.Popen(
                [binary, "-c", str(config)],
                stdout=subprocess.DEVNULL,
                stderr=err,
                text=True,
                env=env,
            )
        # Ready once it takes a connection (its log says so too, but a log is no signal).
        deadline = time.monotonic() + READY_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop(signal.SIGKILL)
                    raise AssertionError(f"nats-server did not start: {log.read_text()}") from None
                time.sleep(0.02)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None


@attrs.define
class Worker:
    proc: subprocess.Popen[str]
    log: Path

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, sig: int | None = signal.SIGTERM) -> int:
        family = self.descendants() if self.proc.poll() is None else []
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        code = self.proc.wait(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        _, alive = psutil.wait_procs(family, timeout=10)
        assert alive == [], alive
        return code


def start_worker(cwd: Path, nats: Nats, *args: str) -> Worker:
    log = cwd / f"worker-{len(list(cwd.glob('worker-*.log')))}.log"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [*CLI, "worker", *nats.flags("worker"), "--lease", "1", *args],
            cwd=cwd,
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    wait_line(proc, proc.stdout, "taking runs", log)
    return Worker(proc, log)


def start_gateway(cwd: Path, nats: Nats, *args: str) -> Server:
    return start_server(cwd, *nats.flags("gateway"), *args, auth=False)


@attrs.define
class Cluster:
    """nats-server, gateways and workers, all in `cwd`."""

    cwd: Path
    nats: Nats
    gateways: list[Server] = attrs.field(factory=list)
    workers: list[Worker] = attrs.field(factory=list)

    def add_worker(self) -> Worker:
        worker = start_worker(self.cwd, self.nats)
        self.workers.append(worker)
        return worker

    def add_gateway(self, *args: str) -> Server:
        gateway = start_gateway(self.cwd, self.nats, *args)
        self.gateways.append(gateway)
        return gateway

    def worker_running(self, marker: str) -> Worker:
        """The worker whose process tree holds a process with `marker` in its argv."""
        pids = {w.proc.pid: w for w in self.workers}
        for proc in psutil.process_iter(["cmdline"]):
            if marker in " ".join(proc.info["cmdline"] or ()):
                for parent in proc.parents():
                    if parent.pid in pids:
                        return pids[parent.pid]
        raise AssertionError(f"no worker runs {marker}")

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop(None if worker.proc.poll() is not None else signal.SIGTERM)
        for gateway in self.gateways:
            gateway.stop(None if gateway.proc.poll() is not None else signal.SIGTERM)
        self.nats.stop()


def open_cluster(
    cwd: Path, gateways: int, workers: int, *, max_payload: int | None = None
) -> Cluster:
    nats = Nats(cwd / "jetstream", max_payload=max_payload)
    nats.start()
    cluster = Cluster(cwd, nats)
    try:
        for _ in range(gateways):
            cluster.add_gateway()
        for _ in range(workers):
            cluster.add_worker()
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _carried(msg: Any) -> list[tuple[int, dict[str, Any]]]:
    """The frames one message of a run's subject carries, each with its seq: one, or a
    batch (its first seq in `Mcpx-Seq`, its last in `Mcpx-Seq-Last`, one line a frame)."""
    headers = msg.headers or {}
    first = int(headers["Mcpx-Seq"])
    if "Mcpx-Seq-Last" not in headers:
        return [(first, json.loads(msg.data))]
    lines = msg.data.split(b"\n")
    assert len(lines) == int(headers["Mcpx-Seq-Last"]) - first + 1, headers
    return [(seq, json.loads(line)) for seq, line in enumerate(lines, first)]


async def raw_messages(url: str, run_id: str) -> list[tuple[int, list[tuple[int, dict[str, Any]]]]]:
    """Every message JetStream holds on the run's subject: its payload's size in bytes, and
    the frames it carries with their seqs; `url`: a `Nats.client_url`."""
    import nats

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        sub = await js.subscribe(f"mcpx.frames.{run_id}", ordered_consumer=True)
        found = []
        while True:
            msg = await sub.next_msg(timeout=5)
            found.append((len(msg.data), _carried(msg)))
            if msg.metadata.num_pending == 0:
                return found
    finally:
        await nc.close()


async def raw_lines(url: str, run_id: str) -> list[bytes]:
    """Every frame's line JetStream holds on the run's subject, as its messages carry them
    (the bytes a run's chain is over); `url`: a `Nats.client_url`."""
    import nats

    nc = await nats.connect(url)
    try:
        sub = await nc.jetstream().subscribe(f"mcpx.frames.{run_id}", ordered_consumer=True)
        found: list[bytes] = []
        while True:
            msg = await sub.next_msg(timeout=5)
            batch = "Mcpx-Seq-Last" in (msg.headers or {})
            found += msg.data.split(b"\n") if batch else [msg.data]
            if msg.metadata.num_pending == 0:
                return found
    finally:
        await nc.close()


async def raw_frames(url: str, run_id: str) -> list[tuple[int, dict[str, Any]]]:
    """Every frame JetStream holds on the run's subject: (its seq as the headers say, the
    frame), in the stream's order; `url`: a `Nats.client_url`."""
    return [frame for _, frames in await raw_messages(url, run_id) for frame in frames]


async def frames_until_end(url: str, run_id: str) -> list[dict[str, Any]]:
    """The run's frames as JetStream holds them, read until its `end` (bounded by `arun`)."""
    import nats

    nc = await nats.connect(url)
    try:
        sub = await nc.jetstream().subscribe(f"mcpx.frames.{run_id}", ordered_consumer=True)
        frames: list[dict[str, Any]] = []
        while not frames or frames[-1].get("type") != "end":
            msg = await sub.next_msg(timeout=30)
            frames += [frame for _, frame in _carried(msg)]
        return frames
    finally:
        await nc.close()


async def queued(url: str) -> tuple[Any, Any]:
    """An event set once JetStream has acknowledged a request onto the requests stream (its
    ack seen on the gateway's reply inbox): from then on the gateway knows it as queued;
    and the connection that sees it (`url`: a `Nats.client_url`), to close."""
    import asyncio

    import nats

    nc = await nats.connect(url)
    acked = asyncio.Event()

    async def seen(msg: Any) -> None:
        if b'"stream":"MCPX_REQUESTS"' in msg.data.replace(b" ", b""):
            acked.set()

    await nc.subscribe("_INBOX.>", cb=seen)
    await nc.flush()
    return acked, nc


async def publish_request(url: str, data: bytes, headers: dict[str, str] | None = None) -> None:
    """As an outsider who may publish: a message on the requests subject."""
    import nats

    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish("mcpx.requests", data, headers=headers)
    finally:
        await nc.close()


def forged(run_id: str, marker: Path) -> bytes:
    """A request as a gateway queued one before requests were signed: it writes `marker`."""
    request = {"argv": ["sh", "-c", f"echo ran > {marker}"], "cwd": str(marker.parent)}
    return json.dumps({"runId": run_id, "request": json.dumps(request)}).encode()


class PublishedRun:
    """What `Publisher.publish` uses of a run: its journal and its request's run id; a
    publisher that finds the run's subject not empty would cancel it, which a test here
    never expects."""

    def __init__(self, journal: RunJournal) -> None:
        self.journal = journal
        self.request = type("Request", (), {"run_id": journal.run_id})()

    def cancel(self) -> None:
        raise AssertionError("the run's subject was empty")
