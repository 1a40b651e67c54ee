"""The Kubernetes client the processes share (the Temporal one is `worker/client.py`'s)."""

from __future__ import annotations

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from worker.settings import Settings


def kube_api_client(settings: Settings) -> k8s.ApiClient:
    """A Kubernetes client from the configured kubeconfig (and context), else $KUBECONFIG,
    else in-cluster."""
    configuration = k8s.Configuration()
    if settings.kubeconfig is not None or settings.kube_context is not None:
        # Named, it must be there: no fall back to the in-cluster identity.
        k8s_config.load_kube_config(
            config_file=str(settings.kubeconfig) if settings.kubeconfig else None,
            context=settings.kube_context,
            client_configuration=configuration,
        )
    else:
        try:
            k8s_config.load_kube_config(client_configuration=configuration)
        except k8s_config.ConfigException:
            k8s_config.load_incluster_config(client_configuration=configuration)
    # Activities run in a thread pool: give urllib3 enough connections for all of them.
    configuration.connection_pool_maxsize = 64
    return k8s.ApiClient(configuration)
