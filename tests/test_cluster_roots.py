"""Each cluster worker has its own roots: `[service] roots` in its config, else the directory
it was started in. Two workers started in different directories admitted the same `exec
--remote` or refused it by which took it, and the refusal sent the user to one worker's
config. Real parts: nats-server, a gateway, a worker, the CLI."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from clusterparts import Cluster, Nats, need_nats, start_gateway, start_worker
from service_client import CLI, ENV


def exec_remote(cluster: Cluster, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, "exec", "--remote", cluster.gateways[0].url, "--", "true"],
        check=False, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_a_worker_refusing_a_cwd_outside_its_default_root_says_to_give_each_the_same(
    tmp_path: Path,
) -> None:
    need_nats()
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    nats = Nats(tmp_path / "jetstream")
    nats.start()
    cluster = Cluster(tmp_path, nats)
    try:
        cluster.gateways.append(start_gateway(tmp_path, nats))
        cluster.workers.append(start_worker(there, nats))  # its root: where it started
        refused = exec_remote(cluster, here)
        assert refused.returncode == 2, refused
        assert refused.stderr == (
            f"mcpx-hooks exec: the server said: cwd: {here} is not inside a root of the worker on"
            f" {socket.gethostname()} ({there}: the directory it was started in, as its config"
            " sets no [service] roots, so a worker started elsewhere has other roots); to allow"
            " it, give every worker the same roots: add its directory to each worker's config,"
            ' e.g. [service] roots = ["/srv/project"], and restart them\n'
        )
        assert cluster.workers.pop().stop() == 0

        # Told so, the operator gives the worker its roots: the same request runs.
        config = tmp_path / "worker.toml"
        config.write_text(f'[service]\nroots = ["{here}", "{there}"]\n')
        cluster.workers.append(start_worker(there, nats, "--config", str(config)))
        ran = exec_remote(cluster, here)
        assert ran.returncode == 0, ran.stderr
        elsewhere = exec_remote(cluster, tmp_path)
        assert elsewhere.returncode == 2, elsewhere
        assert f"({here}, {there}); to allow it, add its directory to the worker's config" in (
            elsewhere.stderr
        )
    finally:
        cluster.stop()
    for worker in cluster.workers:
        assert "Traceback" not in worker.log.read_text()
