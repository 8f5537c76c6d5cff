"""The cluster: runs on NATS JetStream. A gateway (`serve --cluster`) keeps the service's API
and queues each run for a worker (`worker --cluster`), which runs it and publishes its frames
and events to streams every gateway reads. nats-py runs on asyncio in a thread of its own
(`bridge.py`); nothing here is imported unless `--cluster` is given.

The names below are loaded on first use (`core/exports.py`).
"""

from ..core.exports import exports

__all__, __getattr__, __dir__ = exports(
    __name__,
    {
        "access": ("AccessError", "ClusterSettings", "NatsAccess", "nats_access", "read_key_file"),
        "gateway": ("Gateway", "run_gateway"),
        "health": ("cluster_report",),
        "jet": ("ClusterDown",),
        "link": ("Cluster", "open_cluster"),
        "names": ("Stream", "stream_specs"),
        "worker": ("WorkerOptions", "run_worker"),
    },
)
